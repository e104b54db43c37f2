"""envs/tasks/find_target.py: spawning, success, hidden goal, hidden motor rotation, shaping."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

import envs

B = envs.BEHAVIOR_NAME


def act(values: np.ndarray | list) -> ActionTuple:
    """An ActionTuple of continuous moves."""
    return ActionTuple(continuous=np.asarray(values, np.float32))


def test_agent_on_the_target_succeeds_with_plus_one_and_is_terminal() -> None:
    env = envs.make("FindTarget", num_areas=2, shaping=0.0, max_step=50)
    core = env.core
    core.pos[:, 1] = core.objective[:, 1]
    env.step()
    decisions, terminals = env.get_steps(B)
    assert terminals.agent_id.tolist() == [1] and terminals.interrupted.tolist() == [False]
    assert terminals.reward.tolist() == [np.float32(1.0) - np.float32(1 / 50)]
    assert decisions.reward.tolist() == [np.float32(-1 / 50), 0.0]
    assert decisions.obs[0][1, 9] == 1.0


def test_spawn_keeps_agent_and_target_apart_and_inside_the_arena() -> None:
    env = envs.make("FindTarget", num_areas=2048, seed=3)
    obs = env.get_steps(B)[0].obs[0]
    assert (np.abs(obs[:, 0:2]) <= 0.9).all()
    assert (np.hypot(obs[:, 4], obs[:, 5]) * 5.0 >= 2.0 - 1e-5).all()
    assert np.array_equal(obs[:, 6:9], np.zeros((2048, 3)))


def test_hidden_goal_is_unobserved_and_fixed_per_task() -> None:
    env = envs.make(
        "FindTarget", num_areas=64, hidden_goal=1, goal_x=0.5, goal_y=-0.25, shaping=0.0
    )
    core = env.core
    assert np.array_equal(env.get_steps(B)[0].obs[0][:, 4:9], np.zeros((64, 5)))
    assert np.array_equal(core.objective, np.array([[2.5] * 64, [-1.25] * 64], np.float32))
    core.pos[:] = core.objective
    env.step()
    assert env.get_steps(B)[1].interrupted.tolist() == [False] * 64


def test_motor_rotation_changes_dynamics_not_observation_layout() -> None:
    plain = envs.make("FindTarget", seed=4, agent_speed=0.5)
    turned = envs.make("FindTarget", seed=4, agent_speed=0.5, motor_rotation=90)
    before = plain.get_steps(B)[0].obs[0]
    assert np.array_equal(before, turned.get_steps(B)[0].obs[0])
    for env in (plain, turned):
        env.core.pos[:] = 0.0
        env.set_actions(B, act([[1.0, 0.0]]))
        env.step()
    a, b = plain.get_steps(B)[0].obs[0], turned.get_steps(B)[0].obs[0]
    assert a.shape == b.shape == (1, 10)
    assert a[0, 0:4] == pytest.approx([0.1, 0.0, 1.0, 0.0], abs=1e-6)
    assert b[0, 0:4] == pytest.approx([0.0, 0.1, 0.0, 1.0], abs=1e-6)
    assert plain.behavior_specs[B] == turned.behavior_specs[B]


@pytest.mark.parametrize("family", ["FindTarget", "CarryObject"])
def test_hidden_velocity_hides_the_last_move_and_nothing_else(family: str) -> None:
    shown = envs.make(family, seed=4, motor_rotation=90)
    hidden = envs.make(family, seed=4, motor_rotation=90, hidden_velocity=1)
    for env in (shown, hidden):
        env.set_actions(B, act([[1.0, 0.0]]))
        env.step()
    a, b = shown.get_steps(B)[0].obs[0], hidden.get_steps(B)[0].obs[0]
    assert np.abs(a[:, 2:4]).max() > 0.5 and np.array_equal(b[:, 2:4], np.zeros_like(b[:, 2:4]))
    assert np.array_equal(np.delete(a, [2, 3], axis=1), np.delete(b, [2, 3], axis=1))


def test_walls_stop_the_agent() -> None:
    env = envs.make("FindTarget", agent_speed=2.0, max_step=1000)
    for _ in range(10):
        env.set_actions(B, act([[1.0, 1.0]]))
        env.step()
    obs = env.get_steps(B)[0].obs[0]
    assert obs[0, 0:2].tolist() == [1.0, 1.0] and obs[0, 2:4].tolist() == [0.0, 0.0]


def test_shaping_rewards_approach_and_is_off_with_zero() -> None:
    rewards = {}
    for shaping in (1.0, 0.0):
        env = envs.make("FindTarget", seed=5, shaping=shaping)
        towards = env.get_steps(B)[0].obs[0][:, 4:6]
        env.set_actions(B, act(towards / np.abs(towards).max()))
        env.step()
        rewards[shaping] = float(env.get_steps(B)[0].reward[0])
    assert rewards[0.0] == pytest.approx(-0.01)
    assert 0.0 < rewards[1.0] + 0.01 <= 0.2 * np.sqrt(2) / 10 + 1e-6


def test_random_policy_rarely_succeeds() -> None:
    env = envs.make("FindTarget", num_areas=256, seed=1)
    rng = np.random.default_rng(0)
    for _ in range(200):
        env.set_actions(B, act(rng.uniform(-1, 1, (256, 2))))
        env.step()
    stats = env.stats_channel.get_and_reset_stats()
    success = [v for v, _ in stats["Environment/Success"]]
    assert len(success) >= 256 and np.mean(success) < 0.2
