"""Each update's point of the learning curve: its steps and the episodes its buffer finished."""

from __future__ import annotations

import math

import pytest

import envs
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.train import STEPS
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.observe.tags import CUMULATIVE_REWARD, SUCCESS
from tests.algorithm.stacking import train_one

NETWORK = NetworkConfig(hidden_units=16, num_layers=1)


def _updates(cfg: PPOConfig) -> tuple[list[dict[str, float]], dict[str, float]]:
    env = envs.make("FindTarget", num_areas=8, seed=0, max_step=20, target_radius=2.5)
    trained = train_one(env, policy_for(env, NETWORK), cfg, 0)
    return trained.updates, trained.stats


def test_one_buffer_is_the_whole_training() -> None:
    updates, stats = _updates(PPOConfig(batch_size=64, buffer_size=256, max_steps=256))
    (update,) = updates
    assert update[STEPS] == stats["steps"] == 256
    assert update[CUMULATIVE_REWARD] == pytest.approx(stats[CUMULATIVE_REWARD])
    assert update[SUCCESS] == pytest.approx(stats[SUCCESS])


def test_the_buffers_points_add_up_to_the_training() -> None:
    updates, stats = _updates(PPOConfig(batch_size=64, buffer_size=256, max_steps=1024))
    assert [u[STEPS] for u in updates] == [256, 512, 768, 1024]
    rewards = [u[CUMULATIVE_REWARD] for u in updates if not math.isnan(u[CUMULATIVE_REWARD])]
    assert min(rewards) <= stats[CUMULATIVE_REWARD] <= max(rewards)
    assert len(set(rewards)) > 1  # a point per buffer, not the training's mean
