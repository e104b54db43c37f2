"""envs/tasks/adapter.py: the BaseEnv contract, checked against the real mlagents_envs types."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BaseEnv,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.exception import UnityActionException, UnityEnvironmentException

import envs
from envs.tasks.adapter import TaskEnv

B = envs.BEHAVIOR_NAME
NAMES = ["FindTarget", "CarryObject"]


def act(values: np.ndarray | list) -> ActionTuple:
    """An ActionTuple of continuous moves."""
    return ActionTuple(continuous=np.asarray(values, np.float32))


def _one_line(info: pytest.ExceptionInfo) -> str:
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", NAMES)
def test_behavior_spec_is_one_brain_shared_by_both_tasks(name: str) -> None:
    env = envs.make(name, num_areas=2)
    assert isinstance(env, BaseEnv)
    assert list(env.behavior_specs) == [B]
    spec = env.behavior_specs[B]
    assert [o.shape for o in spec.observation_specs] == [(10,)]
    assert spec.action_spec == ActionSpec.create_continuous(2)
    assert spec == envs.make("FindTarget").behavior_specs[B]


@pytest.mark.parametrize("name", NAMES)
def test_get_steps_returns_real_types_with_stable_agent_ids(name: str) -> None:
    env = envs.make(name, num_areas=3, max_step=4)
    env.reset()
    for _ in range(9):
        decisions, terminals = env.get_steps(B)
        assert type(decisions) is DecisionSteps and type(terminals) is TerminalSteps
        assert decisions.agent_id.tolist() == [0, 1, 2] and decisions.agent_id.dtype == np.int32
        assert decisions.obs[0].shape == (3, 10) and decisions.obs[0].dtype == np.float32
        assert decisions.reward.dtype == np.float32 and decisions.action_mask is None
        assert terminals.obs[0].dtype == np.float32 and terminals.interrupted.dtype == bool
        assert decisions[1].obs[0].shape == (10,)
        env.set_actions(B, env.behavior_specs[B].action_spec.random_action(3))
        env.step()


def test_max_step_ends_interrupted_and_the_agent_is_reset_in_the_same_step() -> None:
    env = envs.make("FindTarget", num_areas=2, max_step=5)
    for t in range(1, 6):
        env.step()
        decisions, terminals = env.get_steps(B)
        if t < 5:
            assert len(terminals) == 0
            assert decisions.obs[0][:, 9] == pytest.approx(1 - t / 5)
    assert terminals.agent_id.tolist() == [0, 1]
    assert terminals.interrupted.tolist() == [True, True]
    assert terminals[1].interrupted and terminals.obs[0][:, 9].tolist() == [0.0, 0.0]
    assert terminals.reward == pytest.approx(-0.2)
    assert decisions.agent_id.tolist() == [0, 1] and decisions.reward.tolist() == [0.0, 0.0]
    assert decisions.obs[0][:, 9].tolist() == [1.0, 1.0]
    assert not np.array_equal(decisions.obs[0][:, :2], terminals.obs[0][:, :2])


def test_step_without_actions_uses_zero_actions() -> None:
    idle, zero = envs.make("CarryObject", num_areas=3), envs.make("CarryObject", num_areas=3)
    for _ in range(3):
        idle.step()
        zero.set_actions(B, act(np.zeros((3, 2))))
        zero.step()
    assert np.array_equal(idle.get_steps(B)[0].obs[0], zero.get_steps(B)[0].obs[0])
    assert np.array_equal(idle.get_steps(B)[0].obs[0][:, 2:4], np.zeros((3, 2)))


def test_set_action_for_agent_sets_one_row_and_others_are_zero() -> None:
    one, full = envs.make("FindTarget", num_areas=3), envs.make("FindTarget", num_areas=3)
    one.set_action_for_agent(B, 1, act([[0.5, -0.25]]))
    one.step()
    full.set_actions(B, act([[0, 0], [0.5, -0.25], [0, 0]]))
    full.step()
    assert np.array_equal(one.get_steps(B)[0].obs[0], full.get_steps(B)[0].obs[0])


def test_values_are_clipped_to_unit_range() -> None:
    big, unit = envs.make("FindTarget"), envs.make("FindTarget")
    big.set_actions(B, act([[5.0, -np.inf]]))
    unit.set_actions(B, act([[1.0, -1.0]]))
    big.step()
    unit.step()
    assert np.array_equal(big.get_steps(B)[0].obs[0], unit.get_steps(B)[0].obs[0])


def _float64_tuple() -> ActionTuple:
    action = act(np.zeros((2, 2)))
    action._continuous = np.zeros((2, 2))
    return action


@pytest.mark.parametrize(
    ("action", "named"),
    [
        (act(np.zeros((2, 3))), "(2, 3)"),
        (act(np.zeros((3, 2))), "(3, 2)"),
        (act(np.zeros(4)), "(4,)"),
        (_float64_tuple(), "float64"),
        (np.zeros((2, 2), np.float32), "ndarray"),
        (
            ActionTuple(continuous=np.zeros((2, 2), np.float32), discrete=np.zeros((2, 1))),
            "discrete",
        ),
        (act([[0.0, np.nan], [0.0, 0.0]]), "NaN"),
    ],
)
def test_bad_actions_raise_one_line_value_errors(action: ActionTuple, named: str) -> None:
    env = envs.make("FindTarget", num_areas=2)
    with pytest.raises(ValueError) as info:
        env.set_actions(B, action)
    assert named in _one_line(info)
    assert isinstance(info.value, UnityActionException)


def test_bad_names_and_agent_ids() -> None:
    env = envs.make("FindTarget", num_areas=2)
    for call in (lambda: env.get_steps("Brian"), lambda: env.set_actions("Brian", act([[0, 0]]))):
        with pytest.raises(ValueError, match="Brian") as info:
            call()
        _one_line(info)
    for bad in (2, -1, 1.0):
        with pytest.raises(ValueError) as info:
            env.set_action_for_agent(B, bad, act([[0, 0]]))  # type: ignore[arg-type]
        assert str(bad) in _one_line(info) and isinstance(info.value, IndexError)
    with pytest.raises(ValueError, match=r"\(1, 2\)"):
        env.set_action_for_agent(B, 0, act([[0, 0], [0, 0]]))
    with pytest.raises(ValueError, match="num_areas"):
        envs.make("FindTarget", num_areas=0)
    with pytest.raises(ValueError, match="seed"):
        envs.make("FindTarget", seed=1.5)  # type: ignore[arg-type]


def test_failed_set_action_for_agent_leaves_no_garbage() -> None:
    env, twin = envs.make("FindTarget", num_areas=2), envs.make("FindTarget", num_areas=2)
    with pytest.raises(ValueError):
        env.set_action_for_agent(B, 0, act([[np.nan, 0]]))
    env.step()
    twin.step()
    assert np.array_equal(env.get_steps(B)[0].obs[0], twin.get_steps(B)[0].obs[0])


def test_set_parameters_apply_from_each_areas_next_episode() -> None:
    env = envs.make("FindTarget", num_areas=2, max_step=10, shaping=0.0)
    assert isinstance(env, TaskEnv)
    for _ in range(3):
        env.step()
    env.set_parameters(max_step=40)
    assert env.parameters["max_step"] == 40.0
    core = env.core
    core.pos[:, 0] = core.objective[:, 0]  # area 0 succeeds now, area 1 runs to its old max_step
    env.step()
    decisions, terminals = env.get_steps(B)
    assert terminals.agent_id.tolist() == [0] and terminals.interrupted.tolist() == [False]
    assert decisions.obs[0][:, 9].tolist() == pytest.approx([1.0, 0.6])
    env.step()
    assert env.get_steps(B)[0].obs[0][:, 9].tolist() == pytest.approx([39 / 40, 0.5])
    for _ in range(5):
        env.step()
    assert env.get_steps(B)[1].agent_id.tolist() == [1]
    env.set_parameters(max_step=3)
    env.reset()
    assert len(env.get_steps(B)[1]) == 0
    for _ in range(3):
        env.step()
    assert env.get_steps(B)[1].agent_id.tolist() == [0, 1]


def test_bad_set_parameters_changes_nothing() -> None:
    env = envs.make("CarryObject", carry_speed=0.5)
    for bad in ({"carry_speed": 2.0}, {"colour": 1.0}, {"arena_size": -10.0}):
        with pytest.raises(ValueError) as info:
            env.set_parameters(**bad)
        assert next(iter(bad)) in _one_line(info)
    assert env.parameters["carry_speed"] == 0.5


def test_results_of_a_step_are_not_overwritten_by_later_steps() -> None:
    env = envs.make("CarryObject", num_areas=4)
    decisions, _ = env.get_steps(B)
    kept = decisions.obs[0].copy(), decisions.reward.copy()
    for _ in range(3):
        env.set_actions(B, act(np.ones((4, 2))))
        env.step()
    assert np.array_equal(decisions.obs[0], kept[0])
    assert np.array_equal(decisions.reward, kept[1])


def test_close_then_step_raises_like_unity() -> None:
    env = envs.make("FindTarget")
    env.close()
    with pytest.raises(UnityEnvironmentException):
        env.step()
