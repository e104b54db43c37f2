"""envs/tasks/carry_object.py: pickup, carrying slow-down, delivery, phase-aware shaping."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

import envs

B = envs.BEHAVIOR_NAME


def act(values: np.ndarray | list) -> ActionTuple:
    """An ActionTuple of continuous moves."""
    return ActionTuple(continuous=np.asarray(values, np.float32))


def test_spawn_observes_object_and_goal_apart() -> None:
    env = envs.make("CarryObject", num_areas=2048, seed=2)
    obs = env.get_steps(B)[0].obs[0]
    assert (np.hypot(obs[:, 4], obs[:, 5]) * 5.0 >= 2.0 - 1e-5).all()
    object_to_goal = (obs[:, 6:8] - obs[:, 4:6]) * 5.0
    assert (np.hypot(object_to_goal[:, 0], object_to_goal[:, 1]) >= 2.25 - 1e-5).all()
    assert obs[:, 8].tolist() == [0.0] * 2048


def test_pickup_then_delivery() -> None:
    env = envs.make("CarryObject", num_areas=2, shaping=0.0, carry_speed=0.5, max_step=100)
    core = env.core
    core.pos[:, 0] = core.objective[:, 0]
    env.step()
    decisions, terminals = env.get_steps(B)
    obs = decisions.obs[0]
    assert len(terminals) == 0 and obs[:, 8].tolist() == [1.0, 0.0]
    assert obs[0, 4:6].tolist() == obs[0, 6:8].tolist()
    assert decisions.reward.tolist() == [np.float32(-0.01)] * 2
    env.set_actions(B, act([[1.0, 0.0], [1.0, 0.0]]))
    env.step()
    velocity = env.get_steps(B)[0].obs[0][:, 2:4]
    assert velocity[0].tolist() == pytest.approx([0.5, 0.0])
    core.pos[:, 0] = core.goal[:, 0]
    env.step()
    decisions, terminals = env.get_steps(B)
    assert terminals.agent_id.tolist() == [0] and terminals.interrupted.tolist() == [False]
    assert terminals.reward.tolist() == [np.float32(1.0) - np.float32(0.01)]
    assert terminals.obs[0][0, 8] == 1.0 and decisions.obs[0][0, 8] == 0.0


def test_reaching_the_goal_without_the_object_is_not_success() -> None:
    env = envs.make("CarryObject")
    core = env.core
    core.pos[:, 0] = core.goal[:, 0]
    env.step()
    assert len(env.get_steps(B)[1]) == 0


def test_pickup_changes_the_shaping_potential_by_at_most_one_radius_more_than_a_move() -> None:
    env = envs.make("CarryObject", num_areas=512, seed=9, arena_size=30.0)
    core = env.core
    angle = np.random.default_rng(0).uniform(0, 2 * np.pi, 512)
    near = (np.stack([np.cos(angle), np.sin(angle)], 1) * 1.1).astype(np.float32)
    core.pos[:] = core.objective + near.T
    env.step()
    env.set_actions(B, act(-near / 1.1))
    env.step()
    decisions = env.get_steps(B)[0]
    picked = decisions.obs[0][:, 8] == 1.0
    assert picked.sum() > 400
    bonus = (decisions.reward[picked] + np.float32(1 / 200)) * 30.0
    assert (bonus >= 0.1 - 1e-4).all() and (bonus <= 1.1 + 1.0 + 1e-4).all()
    assert bonus.mean() < 1.5
