"""Measuring stacked: k policies' episodes in lockstep give each its own measurement."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from tinyconfig import TINY_EVAL

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.network import Policy, policy_for
from meta.algorithm.training import train_requests
from meta.config import Config
from meta.config.evaluation import Procedure
from meta.config.ppo import NetworkConfig
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.adapt import AdaptJob, Setting, measured, measured_together
from meta.evaluation.episodes import policy_actor, run_episodes, run_stacked_episodes, stacked_actor
from meta.evaluation.statistics import Measurement
from meta.evaluation.tasks import sample_tasks
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import LocalExecutor
from tests.algorithm.stacking import observe

Factory = Callable[..., Config]
NETWORK = NetworkConfig(hidden_units=16, normalize=True)
PARAMS = [{"max_step": 12}, {"max_step": 30, "agent_speed": 0.5}, {}, {"max_step": 7}]


def _policies(count: int) -> list[Policy]:
    """Policies that differ, with normalisers that moved, on FindTarget's observations."""
    env = envs.make("FindTarget", num_areas=4, seed=0)
    out = []
    for i in range(count):
        torch.manual_seed(i)
        policy = policy_for(env, NETWORK)
        with torch.no_grad():
            policy.log_std.fill_(-0.5 + 0.2 * i)
        observe(policy, torch.randn(64, 10) * (1 + i))
        out.append(policy)
    return out


@pytest.mark.parametrize("deterministic", [True, False])
def test_stacked_episodes_are_each_members_own_episodes(deterministic: bool) -> None:
    # every member acts with its own policy and generator, as its run_episodes would: the
    # bookkeeping over k cores as one must give each member exactly its own numbers
    policies = _policies(len(PARAMS))
    alone = []
    for i, (policy, params) in enumerate(zip(policies, PARAMS, strict=True)):
        env = envs.make("FindTarget", num_areas=3, seed=10 + i, **params)
        act = policy_actor(policy, deterministic, torch.Generator().manual_seed(i))
        alone.append(run_episodes(env, act, 7))  # 3 episodes of every area, 9 counted
    acts = [
        policy_actor(p, deterministic, torch.Generator().manual_seed(i))
        for i, p in enumerate(policies)
    ]

    def each_own(obs: torch.Tensor, active: np.ndarray) -> torch.Tensor:
        # a member whose episodes are counted acts no more (its generator draws no more)
        actions = torch.zeros(*obs.shape[:2], 2)
        for i in np.flatnonzero(active):
            actions[i] = torch.from_numpy(acts[i](obs[i].numpy()))
        return actions

    made = [
        envs.make("FindTarget", num_areas=3, seed=10 + i, **params)
        for i, params in enumerate(PARAMS)
    ]
    stacked = run_stacked_episodes(made, each_own, 7)
    assert stacked == alone
    assert {episodes for _, _, episodes in alone} == {9}
    assert len({reward for reward, _, _ in alone}) == len(PARAMS)  # the members differ


def test_a_stacked_actor_acts_as_each_members_policy_in_any_stack() -> None:
    policies = _policies(5)
    obs = torch.randn(5, 6, 10)
    weights = [p.state_dict() for p in policies]

    def actor(
        count: int, deterministic: bool, active: list[bool] | None = None, piece: int = 2
    ) -> torch.Tensor:
        gens = [torch.Generator().manual_seed(i) for i in range(count)]
        rows = piece * obs.shape[1]  # pieces of `piece` to 2·piece−1 members
        act = stacked_actor(weights[:count], NETWORK, "cpu", deterministic, gens, rows)
        return act(obs[:count], np.array(active or [True] * count))

    greedy, sampled = actor(5, True), actor(5, False)
    for i, policy in enumerate(policies):
        mean = torch.from_numpy(policy_actor(policy, True, torch.Generator())(obs[i].numpy()))
        drawn = policy_actor(policy, False, torch.Generator().manual_seed(i))(obs[i].numpy())
        drawn = torch.from_numpy(drawn)
        assert torch.allclose(greedy[i], mean, atol=1e-6, rtol=0)
        assert torch.allclose(sampled[i], drawn, atol=1e-6, rtol=0)  # its generator's draws
    assert not torch.equal(greedy, sampled)
    # pieces of 2 or 3 members: a member's bits do not depend on the stack around it
    assert torch.equal(actor(2, True), greedy[:2])
    assert torch.equal(actor(3, False), sampled[:3])
    # a piece none of whose members is active is skipped (pieces 0-2 and 3-4): the bits stay
    partly = actor(5, False, [False, False, True, False, False])
    assert torch.equal(partly[2], sampled[2]) and not partly[3:].any()
    # nor on the piece it is in: the five as one piece (the default's rows for few areas)
    assert torch.equal(actor(5, True, piece=5), greedy)
    assert torch.equal(actor(5, False, piece=5), sampled)


def _text(rows: list[list[Measurement]]) -> list[str]:
    """Rows as text (their win-rate columns are NaN, which no NaN equals)."""
    return [repr(row) for job in rows for row in job]


def _jobs(tiny_config: Factory, budgets: str) -> tuple[list[AdaptJob], EnvPool]:
    cfg = tiny_config(*TINY_EVAL, "eval.tasks_per_family=2", budgets)
    setting = Setting(cfg, cfg.eval, seed=0)
    tasks = sample_tasks(setting, parse_environment_parameters({}, [BEHAVIOR_NAME]))
    procedure = Procedure(learning_rate=0.01)
    jobs = [
        AdaptJob(setting, task, "scratch", None, seed, procedure=procedure)
        for family in ("FindTarget", "CarryObject")
        for task in tasks[family, "test"]
        for seed in range(2)
    ]
    return jobs, EnvPool(cfg.env)


def test_measured_together_gives_the_rows_measured_alone(tiny_config: Factory) -> None:
    jobs, pool = _jobs(tiny_config, "eval.budgets=[0,1,3]")
    requests = [job.request() for job in jobs]
    made = [pool.env(r.tasks[0].family, r.tasks[0].params, r.seed) for r in requests]
    results = train_requests(requests, made)
    together = measured_together(pool, jobs, results)
    alone = [measured(pool, job, result) for job, result in zip(jobs, results, strict=True)]
    assert len(together) == len(jobs) == 8 and {len(rows) for rows in together} == {3}
    keys = ("method", "family", "split", "task", "seed", "budget", "env_steps", "episodes")
    for t, a in zip(
        (r for rows in together for r in rows), (r for rows in alone for r in rows), strict=True
    ):
        assert [getattr(t, k) for k in keys] == [getattr(a, k) for k in keys]
        assert t.adaptation == a.adaptation and t.task_params == a.task_params
        # the stacked products round the actions differently in their last bits, which moves
        # the shaped rewards by as much; no episode's end moved on these tasks (an action
        # rounding across a goal's edge would)
        assert t.success == a.success
        assert t.mean_reward == pytest.approx(a.mean_reward, abs=1e-6)
    # a job's rows do not depend on the jobs measured beside it
    assert _text(measured_together(pool, jobs[2:4], results[2:4])) == _text(together[2:4])


def test_the_local_executor_measures_a_stack_together(tiny_config: Factory) -> None:
    jobs, pool = _jobs(tiny_config, "eval.budgets=[0,2]")
    requests = [job.request() for job in jobs]
    made = [pool.env(r.tasks[0].family, r.tasks[0].params, r.seed) for r in requests]
    expected = measured_together(pool, jobs, train_requests(requests, made))
    assert _text(list(LocalExecutor(pool).run(jobs))) == _text(expected)
