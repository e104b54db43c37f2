"""ML-Agents' buffer assembly (`ppo.buffer_assembly=pieces`): whole pieces, none lost or twice."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo import train as ppo_train
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.pieces import PieceCollector, time_slice
from meta.algorithm.ppo.rollout import Collector, Rollout
from meta.algorithm.ppo.train import PPORun, policy_for, train
from meta.algorithm.ppo.update import dimension_log_probs

NETWORK = NetworkConfig(hidden_units=16, num_layers=1)
TASK = {"max_step": 23, "target_radius": 2.5, "agent_speed": 1.5}
"""Fast agents that often reach the target: episodes of different lengths, areas out of step."""
PIECES = PPOConfig(
    batch_size=64,
    buffer_size=200,
    max_steps=1200,
    num_epoch=1,
    time_horizon=16,
    buffer_assembly="pieces",
)


def _collector(seed: int = 0) -> tuple[Collector, PieceCollector]:
    env = envs.make("FindTarget", num_areas=6, seed=seed, **TASK)
    policy = policy_for(env, NETWORK, seed)
    collector = Collector(env, BEHAVIOR_NAME, policy, torch.Generator().manual_seed(seed), 16)
    return collector, PieceCollector(collector, policy, PIECES)


def test_each_buffer_is_whole_pieces_just_over_buffer_size() -> None:
    _, pieces = _collector()
    for _ in range(5):
        buffer = pieces.collect(0)
        assert buffer.valid is not None
        assert buffer.num_steps > PIECES.buffer_size
        for agent in range(pieces.num_agents):
            steps = torch.nonzero(buffer.valid[:, agent]).ravel()
            if len(steps) == 0:
                continue
            assert torch.equal(steps, torch.arange(int(steps[0]), int(steps[-1]) + 1))
            assert buffer.boundaries[steps[-1], agent] == 1.0  # it ends where a piece does
        # it ends at its first step over the size: a piece ends at its last step, and the
        # pieces complete one step before it do not exceed the size
        assert buffer.valid[-1].any()
        ends = buffer.valid[:-1] & (buffer.boundaries[:-1] > 0)
        done = torch.cumsum(ends.flip(0).int(), 0).flip(0) > 0  # at or before a piece's end
        assert int((buffer.valid[:-1] & done).sum()) <= PIECES.buffer_size


def test_every_step_is_in_exactly_one_buffer_or_the_carry() -> None:
    collector, pieces = _collector(1)
    stepped = 0
    original = collector.collect

    def counted(steps: int) -> Rollout:
        nonlocal stepped
        stepped += steps
        return original(steps)

    collector.collect = counted  # type: ignore[method-assign]
    used = sum(pieces.collect(0).num_steps for _ in range(6))
    carry = pieces.carry
    left = 0 if carry is None else len(carry.rewards) * pieces.num_agents - int(pieces.first.sum())
    assert used + left == stepped * pieces.num_agents


def _until_carried(pieces: PieceCollector) -> Rollout:
    """Buffers until one leaves steps for the next (areas in step at first cut together)."""
    for _ in range(30):
        buffer = pieces.collect(0)
        if pieces.carry is not None:
            return buffer
    raise AssertionError("no buffer left steps for the next")


def test_a_carried_step_is_the_step_the_last_buffer_took() -> None:
    _, pieces = _collector(2)
    first = _until_carried(pieces)
    carry, begin = pieces.carry, pieces.first.copy()
    assert carry is not None and (begin < len(carry.rewards)).any()
    second = pieces.collect(0)
    tail = len(carry.rewards)
    assert torch.equal(second.obs[:tail], first.obs[len(first.obs) - tail :])
    assert torch.equal(second.actions[:tail], first.actions[len(first.actions) - tail :])
    for agent in range(pieces.num_agents):
        steps = torch.nonzero(second.valid[:, agent]).ravel()  # type: ignore[index]
        if len(steps):
            assert int(steps[0]) == begin[agent]  # it starts right after its last buffer's end


def test_a_pieces_training_is_deterministic_and_updates_on_its_buffers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes: list[int] = []
    update = ppo_train.ppo_update

    def spy(policy, optimizer, rollout, *args, **kwargs):
        sizes.append(rollout.num_steps)
        return update(policy, optimizer, rollout, *args, **kwargs)

    monkeypatch.setattr(ppo_train, "ppo_update", spy)
    weights, stats = [], []
    for _ in range(2):
        env = envs.make("FindTarget", num_areas=6, seed=3, max_step=23)
        policy = policy_for(env, NETWORK, 3)
        stats.append(train(PPORun(env, policy, PIECES, 3)))
        weights.append(policy.state_dict())
    first = sizes[: len(sizes) // 2]
    assert all(size > PIECES.buffer_size for size in first)
    assert stats[0]["steps"] == sum(first) >= PIECES.max_steps
    same = [k for k in stats[0] if "time" not in k]
    assert [stats[0][k] for k in same] == pytest.approx([stats[1][k] for k in same], nan_ok=True)
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_per_dimension_log_probs_of_carried_steps_stay_those_of_the_policy_that_acted() -> None:
    env = envs.make("FindTarget", num_areas=6, seed=4, **TASK)
    policy = policy_for(env, NETWORK, 4)
    collector = Collector(env, BEHAVIOR_NAME, policy, torch.Generator().manual_seed(4), 16)
    pieces = PieceCollector(collector, policy, dataclasses.replace(PIECES, ratio="per_dimension"))
    first = _until_carried(pieces)
    assert first.log_probs.shape[-1] == 2
    assert pieces.carry is not None
    tail = len(pieces.carry.rewards)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05)  # as an update would: the carried steps were acted before it
    second = pieces.collect(0)
    assert torch.equal(second.log_probs[:tail], first.log_probs[len(first.log_probs) - tail :])
    new = dimension_log_probs(policy, time_slice(second, tail))
    assert torch.allclose(second.log_probs[tail:], new.log_probs)


def test_games_and_stacks_refuse_pieces_in_one_line() -> None:
    from meta.algorithm.reptile import Task
    from meta.algorithm.request import TrainRequest
    from meta.algorithm.stacked.train import stackable

    request = TrainRequest((Task("FindTarget", {}),), None, 0, PIECES, NETWORK)
    assert stackable(request) == "ppo.buffer_assembly=pieces"
    with pytest.raises(ValueError, match=r"ppo\.buffer_assembly"):
        dataclasses.replace(PIECES, buffer_assembly="episodes").validate()
