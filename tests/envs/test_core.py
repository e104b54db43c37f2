"""envs/tasks/core.py and rng.py: counter-based draws, spawning, batched = one-area copies."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

import envs
from envs.tasks.core import norm, pick_far, spread
from envs.tasks.rng import area_keys, mix, uniforms

B = envs.BEHAVIOR_NAME


def test_mix_matches_splitmix64_reference() -> None:
    def reference(x: int) -> int:
        mask = 2**64 - 1
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    values = [0, 1, 12345, 2**63 + 7, 2**64 - 1]
    assert mix(np.array(values, np.uint64)).tolist() == [reference(v) for v in values]


def test_area_key_i_is_the_key_of_seed_plus_i() -> None:
    keys = area_keys(7, 5)
    assert [int(area_keys(7 + i, 1)[0]) for i in range(5)] == keys.tolist()
    assert area_keys(-1, 2)[1] == area_keys(0, 1)[0]
    assert len(set(area_keys(0, 1000).tolist())) == 1000


def test_uniforms_are_float32_in_unit_interval_and_depend_on_every_counter() -> None:
    keys = area_keys(3, 4)
    u = uniforms(keys, np.zeros(4, np.uint64), 6)
    assert u.dtype == np.float32 and u.shape == (4, 6)
    assert ((u >= 0) & (u < 1)).all()
    assert np.array_equal(u, uniforms(keys, np.zeros(4, np.uint64), 6))
    assert not np.array_equal(u, uniforms(keys, np.ones(4, np.uint64), 6))
    assert np.array_equal(u[2:3], uniforms(keys[2:3], np.zeros(1, np.uint64), 6))
    assert len(np.unique(u)) == u.size


def test_spread_and_norm() -> None:
    u = np.array([[0.0, 0.5, 0.75, 0.25], [0.0, 0.5, 0.75, 0.25]], np.float32)
    points = spread(u, np.array([4.0, 2.0], np.float32))
    assert points.tolist() == [[[-4.0, 0.0], [2.0, -2.0]], [[-2.0, 0.0], [1.0, -1.0]]]
    assert norm(np.array([[3.0, 4.0]], np.float32)).tolist() == [5.0]


def test_pick_far_takes_first_far_enough_candidate_else_shifts_towards_the_centre() -> None:
    candidates = np.array(
        [[[0.5, 0], [3, 0], [5, 0]], [[0.1, 0], [0.2, 0], [0.3, 0]], [[-2, 1], [-2, 1], [-2, 1]]],
        np.float32,
    )
    anchor = np.array([[0, 0], [0, 0], [-2, 1]], np.float32)
    picked = pick_far(candidates, anchor, np.full(3, 2.0, np.float32))
    assert picked.tolist() == [[3.0, 0.0], [-2.0, 0.0], [0.0, 1.0]]
    # each area its own distance: the first area's 0.4 takes its first candidate
    picked = pick_far(candidates, anchor, np.array([0.4, 2.0, 1.0], np.float32))
    assert picked.tolist() == [[0.5, 0.0], [-2.0, 0.0], [-1.0, 1.0]]


def _run(
    name: str, num_areas: int, seed: int, noise: np.ndarray, switch_at: int
) -> list[tuple[np.ndarray, ...]]:
    """Steps of a noisy greedy policy; parameters change mid-run. Per step: the step data."""
    env = envs.make(name, num_areas=num_areas, seed=seed, max_step=60)
    out: list[tuple[np.ndarray, ...]] = []
    obs = env.get_steps(B)[0].obs[0]
    for t, shake in enumerate(noise):
        if t == switch_at:
            env.set_parameters(motor_rotation=30.0, max_step=50)
        env.set_actions(B, ActionTuple(continuous=obs[:, 4:6] * np.float32(4.0) + shake))
        env.step()
        d, term = env.get_steps(B)
        out.append((d.obs[0], d.reward, term.agent_id, term.obs[0], term.reward, term.interrupted))
        obs = d.obs[0]
    return out


@pytest.mark.parametrize("name", ["FindTarget", "CarryObject"])
def test_n_areas_equal_n_one_area_envs_bitwise(name: str) -> None:
    n, steps, seed = 37, 200, 11  # 37 areas: vectorised loops and their scalar tails both run
    noise = np.random.default_rng(0).uniform(-1.0, 1.0, (steps, n, 2)).astype(np.float32)
    batched = _run(name, n, seed, noise, switch_at=45)
    won = 0
    for i in (0, 1, 18, 36):
        single = _run(name, 1, seed + i, noise[:, i : i + 1], switch_at=45)
        for t in range(steps):
            obs, reward, ids, t_obs, t_reward, t_interrupted = batched[t]
            s_obs, s_reward, s_ids, s_t_obs, s_t_reward, s_interrupted = single[t]
            assert obs[i].tobytes() == s_obs[0].tobytes()
            assert reward[i].tobytes() == s_reward[0].tobytes()
            mine = ids == i
            assert mine.sum() == len(s_ids)
            assert t_obs[mine].tobytes() == s_t_obs.tobytes()
            assert t_reward[mine].tobytes() == s_t_reward.tobytes()
            assert t_interrupted[mine].tolist() == s_interrupted.tolist()
            won += int((~s_interrupted).sum())
    assert won >= 8
    interrupted = np.concatenate([step[5] for step in batched])
    assert interrupted.any() and not interrupted.all()


@pytest.mark.parametrize("name", ["FindTarget", "CarryObject"])
def test_same_seed_same_actions_same_results_and_seeds_differ(name: str) -> None:
    actions = np.random.default_rng(1).uniform(-1, 1, (60, 3, 2)).astype(np.float32)
    first = _run(name, 3, 5, actions, switch_at=20)
    again = _run(name, 3, 5, actions, switch_at=20)
    other = _run(name, 3, 6, actions, switch_at=20)
    for a, b in zip(first, again, strict=True):
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))
    assert first[0][0].tobytes() != other[0][0].tobytes()


def test_reset_draws_a_new_layout_deterministically() -> None:
    env, twin = envs.make("FindTarget", seed=2), envs.make("FindTarget", seed=2)
    before = env.get_steps(B)[0].obs[0].copy()
    env.reset()
    twin.reset()
    after = env.get_steps(B)[0].obs[0]
    assert not np.array_equal(before, after)
    assert np.array_equal(after, twin.get_steps(B)[0].obs[0])
