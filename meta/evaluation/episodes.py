"""Episodes of a policy on a task: the mean return and success of every area's first episodes.

`run_stacked_episodes` runs k policies' episodes on k built-in environments in lockstep.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from envs.tasks.adapter import TaskEnv
from envs.tasks.stack import CoreStack
from meta.algorithm.ppo.network import ROWS, Policy, PolicyStack, pieces
from meta.algorithm.ppo.weights import Weights
from meta.config.ppo import NetworkConfig

Act = Callable[[np.ndarray], np.ndarray]


def policy_actor(policy: Policy, deterministic: bool, generator: torch.Generator) -> Act:
    """`policy` as a function from a batch of observations to actions: its mean action, or one
    drawn from `generator` (a stacked actor of one)."""
    weights, device = [policy.state_dict()], str(policy.device)
    stacked = stacked_actor(weights, policy.network, device, deterministic, [generator])
    one = np.ones(1, bool)
    return lambda obs: stacked(torch.from_numpy(obs)[None], one)[0].cpu().numpy()


def run_episodes(env: AgentEnvironment, act: Act, episodes: int) -> tuple[float, float, int]:
    """Mean return and success over the first ceil(episodes/areas) episodes of every area.

    Counting whole first episodes per area keeps short (successful) episodes from being
    over-represented. Success is an episode the task ended before max_step (not interrupted),
    the only way the tasks end one early.
    """
    env.reset()
    decision, _ = env.get_steps(BEHAVIOR_NAME)
    ids = decision.agent_id.copy()
    order = np.argsort(ids)
    tally = Tally(len(ids), math.ceil(episodes / len(ids)))
    while (tally.done < tally.per_area).any():
        action = np.clip(act(decision.obs[0]), -1, 1).astype(np.float32, copy=False)
        env.set_actions(BEHAVIOR_NAME, ActionTuple(continuous=action))
        env.step()
        decision, terminal = env.get_steps(BEHAVIOR_NAME)
        reward = np.asarray(decision.reward, np.float64).copy()
        if len(terminal) > 0:
            idx = order[np.searchsorted(ids[order], terminal.agent_id)]
            tally.step(reward, idx, terminal.reward, terminal.interrupted)
        else:
            tally.step(reward)
    values = np.concatenate(tally.returns)
    return float(values.mean()), float(np.concatenate(tally.successes).mean()), len(values)


class Tally:
    """Each area's running return and counted episodes: the first `per_area` to end in each."""

    def __init__(self, areas: int, per_area: int) -> None:
        self.per_area = per_area
        self.running = np.zeros(areas, np.float64)
        self.done = np.zeros(areas, np.int64)
        self.areas: list[np.ndarray] = []
        self.returns: list[np.ndarray] = []
        self.successes: list[np.ndarray] = []

    def step(
        self,
        reward: np.ndarray,
        idx: np.ndarray | None = None,
        end_reward: np.ndarray | None = None,
        interrupted: np.ndarray | None = None,
    ) -> None:
        """One step's rewards (float64, every area); `idx` the areas whose episode ended, with
        their last rewards and whether they were interrupted."""
        if idx is None:
            self.running += reward
            return
        assert end_reward is not None and interrupted is not None
        reward[idx] = end_reward
        self.running += reward
        counted = self.done[idx] < self.per_area
        self.areas.append(idx[counted])
        self.returns.append(self.running[idx[counted]])
        self.successes.append(~interrupted[counted])
        self.running[idx] = 0.0
        self.done[idx] += 1


StackedAct = Callable[[torch.Tensor, np.ndarray], torch.Tensor]
"""Every member's actions (k, n, actions) for their observations (k, n, obs); a member whose
`active` (k,) is false may get any actions (its episodes are counted already)."""


def stacked_actor(
    weights: Sequence[Weights],
    network: NetworkConfig,
    device: str,
    deterministic: bool,
    generators: Sequence[torch.Generator],
    rows: int = ROWS,
) -> StackedAct:
    """k policies' `policy_actor`s as one: each member's actions from its own weights and, when
    sampling, its own generator (the draws of its `policy_actor`).

    The means are batched products over fixed pieces of about `rows` observations (2 members
    at least), a piece skipped once none of its members is active, so a member acts with the
    same bits in any stack of 2 or more (those of its stack of one to the products' rounding)."""
    policy = PolicyStack(weights, network.normalize, network.normalizer_epsilon, device)
    std = policy.log_std.detach().exp()[:, None]
    parts: list[tuple[slice, PolicyStack]] = []

    @torch.no_grad()
    def act(obs: torch.Tensor, active: np.ndarray) -> torch.Tensor:
        if not parts:  # the areas per member are known from the first observations
            most = max(rows // obs.shape[1], 2)
            parts.extend((part, policy.members(part)) for part in pieces(policy.k, most))
        obs = obs.to(device)
        mean = torch.zeros((*obs.shape[:2], std.shape[2]), device=obs.device, dtype=obs.dtype)
        for part, member in parts:
            if active[part].any():
                mean[part] = member.mean_from(member.features(obs[part]))
        if deterministic:
            return mean
        for i in np.flatnonzero(active).tolist():
            noise = torch.randn(mean.shape[1:], generator=generators[i], device=mean.device)
            mean[i] += std[i] * noise
        return mean

    return act


def run_stacked_episodes(
    envs: Sequence[TaskEnv], act: StackedAct, episodes: int
) -> list[tuple[float, float, int]]:
    """`run_episodes` of k built-in environments of one family and size, stepped as one core
    with `act` acting for all: each member's mean return, success and episode count, the same
    numbers as its own `run_episodes` given the same actions."""
    for env in envs:
        env.reset()
    stack = CoreStack(envs)
    k, n = len(envs), stack.n
    tally = Tally(k * n, math.ceil(episodes / n))
    obs = stack.observe()
    while (active := np.asarray((tally.done.reshape(k, n) < tally.per_area).any(1))).any():
        acted = act(torch.from_numpy(obs.reshape(k, n, -1)), active)
        action = acted.reshape(k * n, -1).cpu().numpy()
        obs, step_reward, ended = stack.step(np.clip(action, -1, 1).astype(np.float32, copy=False))
        reward = step_reward.astype(np.float64)
        if ended is not None:
            tally.step(reward, ended.agent_id, ended.reward, ended.interrupted)
        else:
            tally.step(reward)
    # each member's episodes in the order they ended, as its own run_episodes lists them
    member = np.concatenate(tally.areas) // n
    order = np.argsort(member, kind="stable")
    bounds = np.searchsorted(member[order], np.arange(k + 1))
    values, won = np.concatenate(tally.returns)[order], np.concatenate(tally.successes)[order]
    return [
        (float(values[a:b].mean()), float(won[a:b].mean()), int(b - a))
        for a, b in itertools.pairwise(bounds)
    ]
