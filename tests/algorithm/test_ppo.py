"""Inner PPO on the real tasks: bootstraps, determinism, isolation, bad input, learning."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from mlagents_envs.base_env import ActionTuple

import envs
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.rollout import Collector
from meta.algorithm.ppo.train import make_optimizer
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.training import train as train_request
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.observe.tags import SUCCESS
from meta.process.compute import torch_threads
from tests.algorithm.stacking import stack_of, train_one

SMALL = PPOConfig(batch_size=256, buffer_size=1024, max_steps=4096, num_epoch=2)


def test_timeouts_bootstrap_from_the_final_state_and_successes_do_not() -> None:
    env = envs.make("FindTarget", num_areas=4, seed=3, max_step=6)
    policy = policy_for(env, NetworkConfig(hidden_units=16), seed=0)
    collector = Collector(env, "Brain", policy, torch.Generator().manual_seed(0), time_horizon=64)
    env.core.pos[:, 0] = env.core.objective[:, 0]  # area 0 starts on its target
    rollout = collector.collect(8)
    # replay the same seed and actions to see the final observations of the ended episodes
    replay = envs.make("FindTarget", num_areas=4, seed=3, max_step=6)
    replay.reset()  # as the collector did
    replay.core.pos[:, 0] = replay.core.objective[:, 0]
    timeouts = successes = 0
    for t in range(8):
        clipped = np.clip(rollout.actions[t].numpy(), -1, 1)
        replay.set_actions("Brain", ActionTuple(continuous=clipped))
        replay.step()
        _, terminal = replay.get_steps("Brain")
        for j, agent in enumerate(terminal.agent_id):
            assert rollout.boundaries[t, agent] == 1.0
            if terminal.interrupted[j]:
                timeouts += 1
                final = torch.from_numpy(terminal.obs[0][j : j + 1])
                expected = stack_of(policy).member_value(0, final)[0]
                assert rollout.next_values[t, agent] == pytest.approx(float(expected), abs=1e-6)
            else:
                successes += 1
                assert rollout.next_values[t, agent] == 0.0
                assert rollout.rewards[t, agent] > 0.9
    assert timeouts >= 3 and successes >= 1


def test_trajectories_are_cut_and_bootstrapped_at_the_time_horizon() -> None:
    env = envs.make("FindTarget", num_areas=2, seed=0, max_step=1000)
    policy = policy_for(env, NetworkConfig(hidden_units=16), seed=0)
    rollout = Collector(env, "Brain", policy, torch.Generator().manual_seed(0), 4).collect(12)
    cut_rows = rollout.boundaries.nonzero()[:, 0].unique().tolist()
    assert {3, 7, 11} <= set(cut_rows)
    inside = rollout.boundaries[:-1] == 0
    assert torch.equal(rollout.next_values[:-1][inside], rollout.values[1:][inside])


def test_same_seed_gives_bitwise_identical_weights_and_trainings_are_isolated() -> None:
    def run(seed: int) -> dict[str, torch.Tensor]:
        env = envs.make("CarryObject", num_areas=16, seed=1)
        start = policy_for(env, NetworkConfig(hidden_units=32), seed=7).state_dict()
        request = TrainRequest((), start, seed, SMALL, NetworkConfig(hidden_units=32))
        return train_request(request, env).weights

    a = run(0)
    torch.manual_seed(1234)  # global state must not matter
    b = run(0)
    c = run(1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_sgd_takes_plain_gradient_steps_and_is_deterministic() -> None:
    net = NetworkConfig(hidden_units=32)

    def run(cfg: PPOConfig) -> TrainResult:
        env = envs.make("FindTarget", num_areas=16, seed=1)
        start = policy_for(env, net, seed=7).state_dict()
        return train_request(TrainRequest((), start, 0, cfg, net, returns_optimizer=True), env)

    sgd = replace(SMALL, optimizer="sgd", learning_rate=0.1)
    a, b, adam = run(sgd), run(sgd), run(SMALL)
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)
    assert not all(torch.equal(a.weights[k], adam.weights[k]) for k in a.weights)
    assert a.optimizer_state is not None and not a.optimizer_state["state"]  # no moments
    env = envs.make("FindTarget", num_areas=2, seed=0)
    assert make_optimizer(stack_of(policy_for(env, net)), sgd).kind == "sgd"
    assert make_optimizer(stack_of(policy_for(env, net)), SMALL).kind == "adam"


def test_one_or_two_torch_threads_train_the_same_weights() -> None:
    # With two threads the actor's and the critic's halves of each step run side by side.
    def run(threads: int) -> dict[str, torch.Tensor]:
        env = envs.make("FindTarget", num_areas=16, seed=2)
        start = policy_for(env, NetworkConfig(hidden_units=32), seed=3).state_dict()
        with torch_threads(threads):
            request = TrainRequest((), start, 0, SMALL, NetworkConfig(hidden_units=32))
            return train_request(request, env).weights

    one, two = run(1), run(2)
    assert list(one) == list(two)
    assert all(torch.equal(one[k], two[k]) for k in one)


def test_result_reports_what_a_trainer_needs() -> None:
    # a large, fast-reached target: a few of the first episodes succeed, most time out
    env = envs.make("FindTarget", num_areas=16, seed=0, target_radius=2.5, agent_speed=0.3)
    start = policy_for(env, NetworkConfig(hidden_units=32), seed=0).state_dict()
    result = train_request(TrainRequest((), start, 0, SMALL, NetworkConfig(hidden_units=32)), env)
    stats = result.stats
    assert stats["steps"] == 4096 and stats["updates"] == 4 and len(result.updates) == 4
    for key in (
        "Environment/Cumulative Reward",
        "Environment/Success",
        "Losses/Policy Loss",
        "Losses/Value Loss",
        "Policy/Entropy",
        "wall_time_s",
        "episodes",
    ):
        assert key in stats
    # success is the share of the finished episodes that reached the target: whole episodes
    successes = stats["Environment/Success"] * stats["episodes"]
    assert successes == pytest.approx(round(successes), abs=1e-9)
    assert 0 < round(successes) < stats["episodes"]
    assert not all(torch.equal(start[k], result.weights[k]) for k in start)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("batch_size", 4096),
        ("max_steps", 0),
        ("num_epoch", 0),
        ("learning_rate", -1.0),
        ("learning_rate_schedule", "cosine"),
    ],
)
def test_bad_config_fails_before_any_environment_step(field: str, value: object) -> None:
    env = envs.make("FindTarget", num_areas=2, seed=0)
    before = env.get_steps("Brain")[0].obs[0].copy()
    policy = policy_for(env, NetworkConfig(hidden_units=8))
    with pytest.raises(ValueError, match=field):
        train_one(env, policy, PPOConfig(**{"buffer_size": 2048, field: value}), 0)
    assert np.array_equal(env.get_steps("Brain")[0].obs[0], before)


def final_success(name: str, steps: int) -> float:
    """Success of the last ~10% of a from-scratch training's episodes."""
    env = envs.make(name, num_areas=64, seed=0)
    policy = policy_for(env, NetworkConfig(), seed=0)
    trained = train_one(env, policy, PPOConfig(max_steps=steps), 0)
    return trained.updates[-1][SUCCESS]  # the episodes finished during the last buffer


@pytest.mark.slow
def test_ppo_learns_find_target_within_300k_steps() -> None:
    assert final_success("FindTarget", 300_000) >= 0.9


@pytest.mark.slow
def test_ppo_learns_carry_object_within_200k_steps() -> None:
    assert final_success("CarryObject", 200_000) >= 0.9
