"""ML-Agents' buffer assembly (`ppo.buffer_assembly=pieces`): whole pieces, none lost or twice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import envs
from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo import train as ppo_train
from meta.algorithm.ppo.network import PolicyStack, gaussian_log_prob, policy_for
from meta.algorithm.ppo.pieces import PieceCollector, dimension_log_probs, time_slice
from meta.algorithm.ppo.rollout import Collector, NullTimers, Rollout, StepHook
from meta.algorithm.request import Task, TrainRequest
from meta.algorithm.selfplay.trainer import GameSession
from meta.algorithm.training import stack_key
from meta.config.ppo import NetworkConfig, PPOConfig, SelfPlayConfig
from tests.algorithm.stacking import stack_of, train_one

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


def _member(env: AgentEnvironment, network: NetworkConfig, seed: int) -> PolicyStack:
    """A fresh policy as the member of a stack of one, as a training collects with it."""
    return stack_of(policy_for(env, network, seed)).member(0)


def _collector(seed: int = 0) -> tuple[Collector, PieceCollector]:
    env = envs.make("FindTarget", num_areas=6, seed=seed, **TASK)
    policy = _member(env, NETWORK, seed)
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

    def counted(steps: int, *hook: StepHook | None) -> Rollout:
        nonlocal stepped
        stepped += steps
        return original(steps, *hook)

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

    def spy(policy, optimizer, rollouts, *args, **kwargs):
        sizes.append(rollouts[0].num_steps)
        return update(policy, optimizer, rollouts, *args, **kwargs)

    monkeypatch.setattr(ppo_train, "ppo_update", spy)
    weights, stats = [], []
    for _ in range(2):
        env = envs.make("FindTarget", num_areas=6, seed=3, max_step=23)
        policy = policy_for(env, NETWORK, 3)
        stats.append(train_one(env, policy, PIECES, 3).stats)
        weights.append(policy.state_dict())
    first = sizes[: len(sizes) // 2]
    assert all(size > PIECES.buffer_size for size in first)
    assert stats[0]["steps"] == sum(first) >= PIECES.max_steps
    same = [k for k in stats[0] if "time" not in k]
    assert [stats[0][k] for k in same] == pytest.approx([stats[1][k] for k in same], nan_ok=True)
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_per_dimension_log_probs_of_carried_steps_stay_those_of_the_policy_that_acted() -> None:
    env = envs.make("FindTarget", num_areas=6, seed=4, **TASK)
    stack = stack_of(policy_for(env, dataclasses.replace(NETWORK, normalize=False), 4))
    policy = stack.member(0)
    collector = Collector(env, BEHAVIOR_NAME, policy, torch.Generator().manual_seed(4), 16)
    pieces = PieceCollector(collector, policy, dataclasses.replace(PIECES, ratio="per_dimension"))
    first = _until_carried(pieces)
    assert first.log_probs.shape[-1] == 2
    assert pieces.carry is not None
    tail = len(pieces.carry.rewards)
    with torch.no_grad():
        for p in stack.parameters():
            p.add_(0.05)  # as an update would: the carried steps were acted before it
    second = pieces.collect(0)
    assert torch.equal(second.log_probs[:tail], first.log_probs[len(first.log_probs) - tail :])
    new = dimension_log_probs(policy, time_slice(second, tail))
    assert torch.allclose(second.log_probs[tail:], new.log_probs)


def test_games_refuse_pieces_in_one_line_and_stacks_take_them() -> None:
    request = TrainRequest((Task("FindTarget", {}),), None, 0, PIECES, NETWORK)
    # buffers of pieces fill at each member's own steps: they stack as any other requests
    assert stack_key(request) == stack_key(dataclasses.replace(request, seed=1))
    game = dataclasses.replace(PIECES, self_play=SelfPlayConfig())
    env = envs.make("Sumo", num_areas=2, seed=0)
    member = _member(env, NETWORK, 0)
    with pytest.raises(ValueError, match=r"ppo\.buffer_assembly=pieces: games of teams"):
        GameSession(env, member, game, None, 0, torch.Generator(), NullTimers())
    with pytest.raises(ValueError, match=r"ppo\.buffer_assembly"):
        dataclasses.replace(PIECES, buffer_assembly="episodes").validate()


class MlagentsNormaliser:
    """ML-Agents 1.1.0's `Normalizer` (torch_entities/networks.py) in float64, written out:
    one observation at mean 0 and variance 1 to start, then one piece at a time."""

    def __init__(self, size: int) -> None:
        self.steps, self.mean, self.variance = 1.0, np.zeros(size), np.ones(size)

    def update(self, x: np.ndarray) -> None:
        total = self.steps + len(x)
        to_old = x - self.mean
        mean = self.mean + (to_old / total).sum(0)
        self.variance = self.variance + ((x - mean) * to_old).sum(0)
        self.mean, self.steps = mean, total

    def __call__(self, x: np.ndarray) -> torch.Tensor:
        normalised = (x - self.mean) / np.sqrt(self.variance / self.steps)
        return torch.from_numpy(np.clip(normalised, -5.0, 5.0)).float()


def test_each_piece_goes_into_the_normaliser_as_it_completes_and_is_valued_right_after() -> None:
    """Replayed with ML-Agents' normaliser, a piece at a time in the order its trainer takes
    them: the steps were acted with the statistics of their time, each piece valued with those
    right after it went in, and the normaliser ends where ML-Agents' does."""
    network = dataclasses.replace(NETWORK, normalizer_epsilon=0.0)
    cfg = dataclasses.replace(PIECES, ratio="per_dimension", normalizer_prior=1)
    env = envs.make("FindTarget", num_areas=6, seed=5, **TASK)
    policy = _member(env, network, 5)
    collector = Collector(env, BEHAVIOR_NAME, policy, torch.Generator().manual_seed(5), 16)
    buffer = PieceCollector(collector, policy, cfg).collect(0)
    assert buffer.valid is not None and buffer.bootstrap is not None
    obs, (steps, n) = buffer.obs.double().numpy(), buffer.rewards.shape
    ended, cuts = buffer.bootstrap.ended, buffer.boundaries.numpy() > 0
    timeouts = {
        (t, int(i)): last
        for t, rows, lasts in buffer.bootstrap.pieces
        for i, last in zip(rows, lasts, strict=True)
    }
    reference, begun, checked = MlagentsNormaliser(obs.shape[-1]), np.zeros(n, np.int64), 0
    noise = torch.Generator().manual_seed(5)  # the collector's: the same draws, in order
    with torch.no_grad():
        for t in range(steps):
            mean = policy.mean_from(reference(obs[t])[None])[0]
            sampled = mean + policy.log_std[0].exp() * torch.randn(mean.shape, generator=noise)
            assert torch.allclose(buffer.actions[t], sampled, atol=1e-5)
            acted = gaussian_log_prob(
                buffer.actions[t], mean, policy.log_std[0], per_dimension=True
            )
            assert torch.allclose(buffer.log_probs[t], acted, atol=1e-5)
            order = [*np.flatnonzero(ended[t]), *np.flatnonzero(cuts[t] & ~ended[t])]
            for i in order:
                reference.update(obs[begun[i] : t + 1, i])
                values = policy.value_from(reference(obs[begun[i] : t + 1, i])[None])[0]
                assert torch.allclose(buffer.values[begun[i] : t + 1, i], values, atol=1e-5)
                if ended[t, i] and (t, i) not in timeouts:
                    assert buffer.next_values[t, i] == 0.0
                else:
                    final = timeouts.get((t, i), obs[t + 1, i] if t + 1 < steps else None)
                    if final is None:
                        final = buffer.bootstrap.last_obs[i].double().numpy()
                    bootstrap = policy.value_from(reference(np.asarray(final)[None])[None])[0]
                    assert torch.allclose(buffer.next_values[t, i], bootstrap[0], atol=1e-5)
                begun[i], checked = t + 1, checked + 1
    assert checked > n and bool(buffer.valid[cuts].all())
    assert float(policy.buffers["normalizer.count"]) == reference.steps == 1 + buffer.num_steps
    mean, var = policy.buffers["normalizer.mean"][0], policy.buffers["normalizer.var"][0]
    assert np.allclose(mean.numpy(), reference.mean, atol=1e-6)
    assert np.allclose(var.numpy(), reference.variance / reference.steps, atol=1e-6)


def test_a_normalised_pieces_training_takes_each_step_into_the_normaliser_once() -> None:
    env = envs.make("FindTarget", num_areas=6, seed=6, **TASK)
    policy = policy_for(env, NETWORK, 6)
    stats = train_one(env, policy, dataclasses.replace(PIECES, normalizer_prior=1), 6).stats
    assert float(policy.normalizer.count) == 1 + stats["steps"]
