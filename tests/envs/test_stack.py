"""Built-in environments of one family stepped as one core: each area as in its own env."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

import envs
from envs.constants import BEHAVIOR_NAME
from envs.tasks.adapter import TaskEnv
from envs.tasks.episode_stats import SUCCESS
from envs.tasks.stack import CoreStack, stackable_envs

AREAS = 6
FAMILY_PARAMS = {
    "FindTarget": [
        {},
        {"hidden_goal": 1, "goal_x": -0.6, "goal_y": 0.2},
        {"target_radius": 0.7, "motor_rotation": 90, "max_step": 20},
    ],
    "CarryObject": [{}, {"carry_speed": 0.5, "goal_radius": 0.8, "max_step": 30}],
}


def _envs(family: str) -> list[TaskEnv]:
    made = [
        envs.make(family, num_areas=AREAS, seed=10 * i + 3, **params)
        for i, params in enumerate(FAMILY_PARAMS[family])
    ]
    for env in made:
        env.reset()
    return made  # type: ignore[return-value]


@pytest.mark.parametrize("family", sorted(FAMILY_PARAMS))
def test_a_stack_steps_every_area_as_its_own_environment_does(family: str) -> None:
    alone, stacked = _envs(family), _envs(family)
    stack = CoreStack(stacked)
    k = len(alone)
    rng = np.random.default_rng(0)
    assert np.array_equal(
        stack.observe(), np.concatenate([e.get_steps(BEHAVIOR_NAME)[0].obs[0] for e in alone])
    )
    ended_any = interrupted_any = False
    for _ in range(120):
        moves = rng.uniform(-1, 1, (k * AREAS, 2)).astype(np.float32)
        obs, reward, ended = stack.step(moves)
        rows = []
        for i, env in enumerate(alone):
            env.set_actions(BEHAVIOR_NAME, ActionTuple(continuous=moves[i * AREAS :][:AREAS]))
            env.step()
            decision, terminal = env.get_steps(BEHAVIOR_NAME)
            part = slice(i * AREAS, (i + 1) * AREAS)
            assert np.array_equal(obs[part], decision.obs[0])
            assert np.array_equal(reward[part], decision.reward)
            rows.append((terminal.agent_id + i * AREAS, terminal.obs[0], terminal.reward))
            interrupted_any |= bool(terminal.interrupted.any())
        ids = np.concatenate([r[0] for r in rows])
        if ended is None:
            assert len(ids) == 0
            continue
        ended_any = True
        assert np.array_equal(ended.agent_id, ids)
        assert np.array_equal(ended.obs, np.concatenate([r[1] for r in rows]))
        assert np.array_equal(ended.reward, np.concatenate([r[2] for r in rows]))
    assert ended_any and interrupted_any  # the comparison saw successes and time-outs
    stack.release()
    for a, s in zip(alone, stacked, strict=True):
        assert a.stats_channel.get_and_reset_stats() == s.stats_channel.get_and_reset_stats()
        for name in type(a.core).STATE:
            assert np.array_equal(getattr(a.core, name), getattr(s.core, name)), name
        (da, ta), (ds, ts) = a.get_steps(BEHAVIOR_NAME), s.get_steps(BEHAVIOR_NAME)
        assert np.array_equal(da.obs[0], ds.obs[0]) and np.array_equal(da.reward, ds.reward)
        assert np.array_equal(ta.agent_id, ts.agent_id) and np.array_equal(ta.obs[0], ts.obs[0])
        # once released, each environment goes on by itself where the stack left it
        a.reset(), s.reset()
        first = [e.get_steps(BEHAVIOR_NAME)[0].obs[0] for e in (a, s)]
        assert np.array_equal(*first)


def test_the_stacked_stats_are_each_members_own_episodes() -> None:
    stacked = _envs("FindTarget")
    stack = CoreStack(stacked)
    for _ in range(40):  # the third task's episodes last 20 steps: two rounds of time-outs
        stack.step(np.zeros((len(stacked) * AREAS, 2), np.float32))
    stack.deliver()
    counts = [len(e.stats_channel.get_and_reset_stats().get(SUCCESS, [])) for e in stacked]
    assert counts == [0, 0, 2 * AREAS]


def test_only_built_in_environments_of_one_family_and_size_stack() -> None:
    find, carry = _envs("FindTarget"), _envs("CarryObject")
    with pytest.raises(ValueError, match="one family and size"):
        CoreStack([find[0], carry[0]])
    small = envs.make("FindTarget", num_areas=AREAS - 1, seed=0)
    with pytest.raises(ValueError, match="one family and size"):
        CoreStack([find[0], small])  # type: ignore[list-item]
    assert stackable_envs([*find, *carry])
    assert not stackable_envs([find[0], small])
    assert not stackable_envs([find[0], envs.make("Sumo", num_areas=AREAS, seed=0)])
