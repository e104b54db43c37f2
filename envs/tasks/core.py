"""Batched task core: every area's state in arrays over areas, stepped all at once.

State is stored as rows of length num_areas (x row, y row, ...), so every operation runs over
contiguous memory. The observation (10 floats) is the state block `_s` times a per-area scale:
agent position (2) and objective minus agent (2) over half the arena, velocity as a fraction
of agent_speed (2), goal zone minus agent (2), holding flag (1), fraction of the episode left
(1). A family says where entities spawn, how phases progress (pickup) and what the goal rows
hold; everything else is shared here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Generic, NamedTuple, TypeVar

import numpy as np

from envs.tasks.family import TaskParams
from envs.tasks.rng import area_keys, uniforms

OBS_SIZE = 10
ACTION_SIZE = 2
CANDIDATES = 4
SPAWN_EXTENT = 0.9
F32 = np.float32

# Rows of the per-area parameter table (family rows follow from COMMON on).
HALF, NEG_HALF, DRIVE, RADIUS, MAX_STEP, SHAPE_K = 0, 1, slice(2, 5), 5, 6, 7
SCALE, INV_MAX, COMMON = slice(8, 18), 17, 18

P = TypeVar("P", bound=TaskParams)
Record = Callable[[np.ndarray, np.ndarray], None]


class Ended(NamedTuple):
    """Areas whose episode ended this step, with their last observation and reward."""

    agent_id: np.ndarray
    obs: np.ndarray
    reward: np.ndarray
    interrupted: np.ndarray


def norm(diff: np.ndarray) -> np.ndarray:
    """Length of each row of an (n, 2) array (always the same float32 operations)."""
    sq = diff * diff
    return np.sqrt(sq[:, 0] + sq[:, 1])


def spread(u: np.ndarray, extent: np.ndarray) -> np.ndarray:
    """(n, 2k) uniforms in [0, 1) as k points per area in its square [-extent, extent]^2."""
    points = u * F32(2.0)
    points -= F32(1.0)
    points *= extent[:, None]
    return points.reshape(len(u), -1, 2)


def pick_far(candidates: np.ndarray, anchor: np.ndarray, min_dist: np.ndarray) -> np.ndarray:
    """Per area, the first of (n, k, 2) candidates at least its min_dist (n,) from anchor.

    Without one, the anchor shifted by min_dist along x towards the centre (still inside the
    arena, as min_dist never exceeds half of it).
    """
    diff = candidates - anchor[..., None, :]
    diff *= diff
    ok = diff[..., 0] + diff[..., 1] >= (min_dist * min_dist)[:, None]
    found = ok.any(axis=1)
    picked = candidates[np.arange(len(candidates)), ok.argmax(axis=1)]
    if not found.all():
        lost = ~found
        fallback = np.broadcast_to(anchor, picked.shape)[lost]
        shift = min_dist[lost]
        fallback[:, 0] += np.where(fallback[:, 0] < 0, shift, -shift)
        picked[lost] = fallback
    return picked


class BatchedTask(Generic[P]):
    """All areas of one task; reset() and step() touch every area with array operations only."""

    DRAWS: ClassVar[int] = 2 * (1 + CANDIDATES)
    STATE: ClassVar[tuple[str, ...]] = (
        "_keys",
        "_episode",
        "_pending",
        "_p",
        "_s",
        "objective",
        "goal",
        "_drive",
        "radius",
        "rest",
        "_phi",
    )
    """The arrays (areas on the last axis) that hold the areas' state between steps."""

    def __init__(self, params: P, num_areas: int, seed: int, record: Record | None = None):
        n = num_areas
        self.num_areas = n
        self.params = params
        self._record = record
        self._keys = area_keys(seed, n)
        self._episode = np.zeros(n, np.uint64)
        self._pending = np.repeat(self._derive(params)[:, None], n, axis=1)
        self._p = self._pending.copy()
        p = self._p
        self._half, self._neg_half, self._scale = p[HALF], p[NEG_HALF], p[SCALE]
        self._max_step, self._inv_max, self._shape_k = p[MAX_STEP], p[INV_MAX], p[SHAPE_K]
        self._s = s = np.zeros((OBS_SIZE, n), F32)
        self.pos, self.vel, self._diff, self._goal_diff = s[0:2], s[2:4], s[4:6], s[6:8]
        self._holding, self.remaining = s[8], s[9]
        self.objective, self.goal, self._next, self._m, self._m2, self._sq = np.zeros(
            (6, 2, n), F32
        )
        self._drive = np.zeros((3, n), F32)
        self.radius, self.rest, self._phi, self._d = np.zeros((4, n), F32)
        self._all = np.arange(n)

    def _derive(self, params: P) -> np.ndarray:
        """Column of the parameter table: what the step needs, computed once per change."""
        half = params.arena_size / 2
        turn = math.radians(params.motor_rotation)
        cos, sin = math.cos(turn) * params.agent_speed, math.sin(turn) * params.agent_speed
        seen = 1 / half if self._objective_visible(params) else 0.0
        scale = (
            [1 / half] * 2
            + [0.0 if params.hidden_velocity else 1 / params.agent_speed] * 2
            + [seen] * 2
            + [1 / half] * 2
            + [1.0, 1 / params.max_step]
        )
        common = [
            half,
            -half,
            cos,
            -sin,
            sin,
            params.target_radius,
            params.max_step,
            params.shaping / params.arena_size,
            *scale,
        ]
        return np.array(common + self._family_rows(params), F32)

    def _objective_visible(self, params: P) -> bool:
        """Whether the objective rows of the observation show the objective."""
        return True

    def _family_rows(self, params: P) -> list[float]:
        """Extra parameter-table rows a family reads (from COMMON on)."""
        return []

    def _place(
        self, idx: np.ndarray, p: np.ndarray, u: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Spawn areas idx with their parameter columns p (rows, n): (n, 2) agent, objective;
        the rest of the path."""
        raise NotImplementedError

    def _progress(self, reached: np.ndarray) -> np.ndarray:
        """Advance phases of areas that reached their objective; return the successes."""
        return reached

    def _track(self) -> None:
        """Update the goal rows of the state after the agents moved."""

    def set_params(self, params: P) -> None:
        """Use `params` from each area's next episode on."""
        self.params = params
        self._pending[...] = self._derive(params)[:, None]

    def reset(self) -> np.ndarray:
        """Start a new episode in every area (pending parameters apply); return observations."""
        self._spawn(self._all)
        return self.observe()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, Ended | None]:
        """Advance every area by one decision of (n, 2) float32 moves in [-1, 1]."""
        move, m, m2, nxt = action.T, self._m, self._m2, self._next
        np.multiply(move, self._drive[0], out=m)
        np.multiply(move[::-1], self._drive[1:], out=m2)
        m += m2
        np.add(self.pos, m, out=nxt)
        np.minimum(nxt, self._half, out=nxt)
        np.maximum(nxt, self._neg_half, out=nxt)
        np.subtract(nxt, self.pos, out=self.vel)
        self.pos[...] = nxt
        self._measure()
        success = self._progress(self._d <= self.radius)
        self._track()
        phi = self._d + self.rest
        reward = self._phi - phi
        reward *= self._shape_k
        reward -= self._inv_max
        reward += success
        self._phi = phi
        self.remaining -= 1.0
        done = self.remaining <= 0.0
        done |= success
        obs = self.observe()
        if not done.any():
            return obs, reward, None
        return self._end(np.flatnonzero(done), success, obs, reward)

    def _end(
        self, idx: np.ndarray, success: np.ndarray, obs: np.ndarray, reward: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Ended]:
        """Report the ended episodes of areas idx and start their next ones."""
        won = success[idx]
        ended = Ended(idx.astype(np.int32), obs[idx], reward[idx], ~won)
        if self._record is not None:
            self._record(won, self._max_step[idx] - self.remaining[idx])
        reward[idx] = 0.0
        self._spawn(idx)
        return self.observe(), reward, ended

    def _measure(self) -> None:
        """Objective minus agent, and its length, for every area."""
        np.subtract(self.objective, self.pos, out=self._diff)
        np.multiply(self._diff, self._diff, out=self._sq)
        np.add(self._sq[0], self._sq[1], out=self._d)
        np.sqrt(self._d, out=self._d)

    def _spawn(self, idx: np.ndarray) -> None:
        """New episodes in areas idx, with the pending parameters and fresh positions."""
        p = self._pending[:, idx]
        self._p[:, idx] = p
        u = uniforms(self._keys[idx], self._episode[idx], self.DRAWS)
        self._episode[idx] += np.uint64(1)
        agent, objective, rest = self._place(idx, p, u)
        diff = objective - agent
        self.pos[:, idx] = agent.T
        self.vel[:, idx] = 0.0
        self._diff[:, idx] = diff.T
        self.remaining[idx] = p[MAX_STEP]
        self.objective[:, idx] = objective.T
        self._drive[:, idx] = p[DRIVE]
        self.radius[idx] = p[RADIUS]
        self.rest[idx] = rest
        self._phi[idx] = norm(diff) + rest

    def observe(self) -> np.ndarray:
        """A new (n, 10) float32 observation array of the current state."""
        obs = np.empty((self.num_areas, OBS_SIZE), F32)
        np.multiply(self._s, self._scale, out=obs.T)
        return obs
