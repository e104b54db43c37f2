"""envs/tasks/sumo.py and teams.py: the game behind BaseEnv, as Unity presents two teams."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple, DecisionSteps, TerminalSteps

import envs
from envs.tasks.teams import TEAM_BEHAVIORS, team_of

T0, T1 = TEAM_BEHAVIORS


def act(values: np.ndarray | list) -> ActionTuple:
    return ActionTuple(continuous=np.asarray(values, np.float32))


def test_two_teams_named_as_unity_names_them_with_the_other_families_spec() -> None:
    env = envs.make("Sumo", num_areas=3, seed=1)
    assert list(env.behavior_specs) == ["Brain?team=0", "Brain?team=1"]
    assert [team_of(name) for name in env.behavior_specs] == [0, 1]
    assert team_of("Brain") is None
    spec = envs.make("FindTarget").behavior_specs["Brain"]
    assert all(s == spec for s in env.behavior_specs.values())
    decisions, terminals = env.get_steps(T1)
    assert isinstance(decisions, DecisionSteps) and isinstance(terminals, TerminalSteps)
    assert env.get_steps(T0)[0].agent_id.tolist() == [0, 1, 2]
    assert decisions.agent_id.tolist() == [3, 4, 5]  # unique across behaviors, as in Unity
    assert envs.family("Sumo").adversarial and not envs.family("FindTarget").adversarial


def test_observations_are_symmetric_and_laid_out_as_documented() -> None:
    env = envs.make("Sumo", num_areas=64, seed=4)
    a, b = (env.get_steps(name)[0].obs[0] for name in TEAM_BEHAVIORS)
    assert a.shape == b.shape == (64, 10) and a.dtype == np.float32
    np.testing.assert_array_equal(a[:, 0:2], -b[:, 0:2])  # spawned at c and -c
    np.testing.assert_allclose(a[:, 4:6], b[:, 0:2] - a[:, 0:2], atol=1e-6)  # opponent - own
    assert (a[:, 2:4] == 0).all() and (a[:, 8] == 0).all() and (a[:, 9] == 1).all()
    radius = np.hypot(a[:, 0], a[:, 1])
    assert ((radius >= 0.3 - 1e-6) & (radius <= 0.7 + 1e-6)).all()


def test_a_push_moves_the_opponent_and_pushing_it_out_wins() -> None:
    env = envs.make("Sumo", num_areas=1, arena_size=4.0, target_radius=0.8, shaping=0.0)
    core = env.core
    core.pos[0, 0], core.pos[1, 0] = (0.8, 0.0), (1.6, 0.0)  # touching, team 1 near the edge
    env.set_actions(T0, act([[1.0, 0.0]]))
    env.step()
    (d0, t0), (d1, t1) = env.get_steps(T0), env.get_steps(T1)
    assert len(t0) == 0
    # team 0 moves 0.2 into team 1 (0.6 apart), the pair shifts 0.2 along, then 0.8 apart
    np.testing.assert_allclose(core.pos[:, 0, 0], [1.0 + 0.2 - 0.1, 1.6 + 0.2 + 0.1], atol=1e-6)
    assert d0.obs[0][0, 8] == 1.0 and d1.obs[0][0, 8] == 1.0
    env.set_actions(T0, act([[1.0, 0.0]]))
    env.step()  # team 1 goes to 2.2, past the edge at 2
    (d0, t0), (d1, t1) = env.get_steps(T0), env.get_steps(T1)
    assert t0.reward.tolist() == [1.0] and t1.reward.tolist() == [-1.0]
    assert t0.interrupted.tolist() == [False] and t1.agent_id.tolist() == [1]
    assert d0.reward.tolist() == [0.0] and d0.obs[0][0, 9] == 1.0  # reset: a new game


def test_time_out_is_an_interrupted_draw_with_zero_final_reward() -> None:
    env = envs.make("Sumo", num_areas=5, seed=2, max_step=3, shaping=1.0, arena_shrink=0.0)
    for _ in range(3):
        env.step()
    for name in TEAM_BEHAVIORS:
        terminals = env.get_steps(name)[1]
        assert terminals.reward.tolist() == [0.0] * 5
        assert terminals.interrupted.tolist() == [True] * 5
    stats = env.stats_channel.get_and_reset_stats()
    assert [v for v, _ in stats["Environment/Success"]] == [0.0] * 5  # no game decided
    assert [v for v, _ in stats["Environment/Episode Length"]] == [3.0] * 5


def test_shaping_is_zero_sum_and_games_are_deterministic() -> None:
    def run(seed: int) -> list[np.ndarray]:
        env = envs.make("Sumo", num_areas=32, seed=seed, motor_rotation=30.0)
        rng, out = np.random.default_rng(0), []
        for _ in range(150):
            for name in TEAM_BEHAVIORS:
                env.set_actions(name, act(rng.uniform(-1, 1, (32, 2))))
            env.step()
            (d0, t0), (d1, t1) = env.get_steps(T0), env.get_steps(T1)
            np.testing.assert_array_equal(d0.reward, -d1.reward)
            np.testing.assert_array_equal(t0.reward, -t1.reward)
            out += [d0.obs[0], t0.reward]
        return out

    first, again = run(7), run(7)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, run(8), strict=True))


def test_parameters_and_actions_are_checked() -> None:
    env = envs.make("Sumo", num_areas=2)
    env.set_parameters(arena_size=5.0, push_strength=0.5)
    assert env.parameters["arena_size"] == 5.0
    with pytest.raises(ValueError, match="push_strength=9 is outside"):
        env.set_parameters(push_strength=9.0)
    with pytest.raises(ValueError, match="unknown behavior 'Brain'"):
        env.set_actions("Brain", act([[0, 0], [0, 0]]))
    with pytest.raises(ValueError):
        env.set_actions(T0, act([[0, 0]]))
    with pytest.raises(IndexError, match="not in Brain\\?team=0"):
        env.set_action_for_agent(T0, 2, act([[0, 0]]))
    env.set_action_for_agent(T1, 3, act([[1, 0]]))
    env.step()
    assert env.core.vel[1, 1, 0] != 0.0 and env.core.vel[1, 0, 0] == 0.0


def test_family_ranges_hold_out_test_values() -> None:
    sumo = envs.family("Sumo")
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for _ in range(200):
            sumo.validate(sumo.sample_params(rng, split))  # every combination is valid
    assert {"arena_size", "agent_speed", "motor_rotation", "push_strength"} <= set(
        sumo.ranges("test")
    )


def test_the_arena_shrinks_over_a_game_and_decides_it() -> None:
    # arena 4, shrink 1, 100 steps: after e steps the half side is 2 * (1 - e / 100)
    env = envs.make("Sumo", num_areas=1, seed=0, arena_size=4.0, arena_shrink=1.0, shaping=0.0)
    core = env.core
    core.pos[0, 0], core.pos[1, 0] = (0.5, 0.0), (-1.0, 0.0)  # team 1 farther from the centre
    for e in range(1, 100):
        env.step()  # nobody moves
        (d0, t0), (d1, t1) = env.get_steps(T0), env.get_steps(T1)
        if len(t0):
            break
        np.testing.assert_allclose(core.half[0], 2.0 * (1 - e / 100), rtol=1e-6)
        # positions over the current half arena: the edge stays at +-1
        np.testing.assert_allclose(d0.obs[0][0, 0], 0.5 / core.half[0], rtol=1e-6)
        np.testing.assert_allclose(d1.obs[0][0, 4], 1.5 / core.half[0], rtol=1e-6)
        half_from_obs = 2.0 * (1 - 1.0 * (1 - d0.obs[0][0, 9]))
        np.testing.assert_allclose(half_from_obs, core.half[0], rtol=1e-5)
    assert e == 51  # the edge passes x = -1 once 2 (1 - e / 100) < 1
    assert t0.reward.tolist() == [1.0] and t1.reward.tolist() == [-1.0]
    assert t0.interrupted.tolist() == [False]


def test_both_out_at_once_is_a_draw_that_ended_and_no_shrink_is_the_fixed_arena() -> None:
    env = envs.make("Sumo", num_areas=8, seed=3, arena_shrink=1.0, max_step=100)
    first: dict[int, tuple[float, bool]] = {}
    for _ in range(99):  # standing still at mirrored spawns: both leave at the same step
        env.step()
        terminals = env.get_steps(T0)[1]
        ended = zip(terminals.agent_id, terminals.reward, terminals.interrupted, strict=True)
        for i, r, cut in ended:
            first.setdefault(int(i), (float(r), bool(cut)))
    # every area's first game ended before the time-out, a draw that ended (rated), not cut
    assert sorted(first) == list(range(8)) and set(first.values()) == {(0.0, False)}
    fixed = envs.make("Sumo", num_areas=8, seed=3, arena_shrink=0.0, max_step=100)
    first = fixed.get_steps(T0)[0].obs[0].copy()
    for _ in range(99):
        fixed.step()
        assert len(fixed.get_steps(T0)[1]) == 0
        np.testing.assert_array_equal(fixed.get_steps(T0)[0].obs[0][:, :2], first[:, :2])
    fixed.step()
    assert fixed.get_steps(T0)[1].interrupted.tolist() == [True] * 8  # the time-out
    with pytest.raises(ValueError, match=r"arena_shrink=-0.5 is outside \[0, 1\]"):
        envs.make("Sumo", arena_shrink=-0.5)
