"""Sumo: a symmetric 1-v-1 pushing game; push the other agent out of the arena to win.

Every area holds two agents, team 0 and team 1, spawned point-symmetrically about the centre.
A move is the command rotated by `motor_rotation` times `agent_speed` (the hidden dynamics the
other families share). Agents closer than `target_radius` touch: the pair then shifts along
the line between them by `push_strength` times the difference of what each pushes towards the
other (a hidden parameter), and they are set apart to the contact distance. An agent whose
centre leaves the square arena loses; both out at once is a draw, and so is the time-out
(interrupted, as a Unity agent's EpisodeInterrupted).

The arena shrinks about its centre: after e of the game's max_step steps its side is
arena_size * (1 - arena_shrink * e / max_step), so a game in which both agents hold on gets
decided as the edge passes the one farther from the centre (arena_shrink 0: the arena keeps
its size, Sumo's first rule; 1: it vanishes at the time-out).

Observation of each agent (10 floats, the other families' size), from its own side: own
position (2) over the current half arena (so the edge is always at +-1), own velocity (2) as
a fraction of agent_speed, opponent minus own position (2) over the current half arena,
opponent velocity (2) as a fraction of agent_speed, contact flag (1), fraction of the episode
left f (1); the current half side is half * (1 - arena_shrink * (1 - f)).

Rewards: the step that ends a game gives exactly the result, +1 to the winner, -1 to the loser
and 0 to both on a draw or time-out (what the ghost trainer and ELO read). Other steps give a
zero-sum potential-based shaping: `shaping` times the change in (own margin to the nearest edge
minus the opponent's) over half the arena at the start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from envs.tasks.core import F32, OBS_SIZE, Record
from envs.tasks.family import SHARED_TEST_RANGES, SHARED_TRAIN_RANGES, Family, TaskParams, param
from envs.tasks.rng import area_keys, uniforms

TEAMS = 2


@dataclass(frozen=True)
class SumoParams(TaskParams):
    """Sumo's parameters: the shared ones (target_radius: contact distance) and the push."""

    arena_size: float = param(4.0, 2.0, 1000.0, "side of the square arena")
    max_step: float = param(
        100, 1, 1_000_000, "steps before a game is interrupted (a draw)", integer=True
    )
    target_radius: float = param(0.8, 0.05, 250.0, "distance at which the two agents touch")
    push_strength: float = param(
        1.0, 0.0, 4.0, "hidden: how far a push moves the pair per unit of push"
    )
    arena_shrink: float = param(
        0.95, 0.0, 1.0, "fraction of the arena's side lost, linearly, by the time-out"
    )


def _sumo(params: TaskParams) -> SumoParams:
    if not isinstance(params, SumoParams):
        raise TypeError(f"Sumo needs SumoParams, got {type(params).__name__}")
    return params


class Games(NamedTuple):
    """Areas whose game ended this step: their last observations, rewards and how it ended."""

    agent_id: np.ndarray
    obs: np.ndarray
    """(2, k, 10): each team's last observation."""
    reward: np.ndarray
    """(2, k): each team's final reward, the result."""
    interrupted: np.ndarray


class SumoCore:
    """All areas of one Sumo task, both teams' state in (2, n, 2) arrays."""

    DRAWS = 2

    def __init__(
        self, params: TaskParams, num_areas: int, seed: int, record: Record | None = None
    ) -> None:
        self.num_areas = n = num_areas
        self.params = self._pending = _sumo(params)
        self._record = record
        self._keys = area_keys(seed, n)
        self._episode = np.zeros(n, np.uint64)
        self.pos = np.zeros((TEAMS, n, 2), F32)
        self.vel = np.zeros((TEAMS, n, 2), F32)
        self.contact = np.zeros(n, F32)
        self.remaining = np.zeros(n, F32)
        self._table = np.zeros((9, n), F32)
        self.half = np.zeros(n, F32)
        """Each area's current half side (the arena shrinks over a game)."""
        self._phi = np.zeros(n, F32)
        self._all = np.arange(n)

    def set_params(self, params: TaskParams) -> None:
        """Use `params` from each area's next game on."""
        self.params = self._pending = _sumo(params)

    def _columns(self, params: SumoParams) -> np.ndarray:
        """Per-area constants: half, speed terms, contact, push, max_step, shaping, shrink."""
        half = params.arena_size / 2
        shrink = params.arena_shrink
        turn = math.radians(params.motor_rotation)
        return np.array(
            [
                half,
                math.cos(turn) * params.agent_speed,
                math.sin(turn) * params.agent_speed,
                params.target_radius,
                params.push_strength,
                params.max_step,
                params.shaping,
                half * (1.0 - shrink),
                half * shrink / params.max_step,
            ],
            F32,
        )

    def reset(self) -> np.ndarray:
        """New games in every area; (2, n, 10) observations."""
        self._spawn(self._all)
        return self._observe()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, Games | None]:
        """Advance every area by one decision of (2, n, 2) float32 moves in [-1, 1]."""
        half, cos, sin, contact, push, _, shaping, _, _ = self._table
        move = np.empty_like(action)
        move[..., 0] = action[..., 0] * cos - action[..., 1] * sin
        move[..., 1] = action[..., 0] * sin + action[..., 1] * cos
        new = self.pos + move
        self._collide(new, move, contact, push)
        np.subtract(new, self.pos, out=self.vel)
        self.pos[...] = new
        self.remaining -= 1.0
        np.multiply(self._table[8], self.remaining, out=self.half)
        self.half += self._table[7]
        margin = self.half - np.abs(new).max(axis=2)
        out = margin < 0
        lost = out & ~out[::-1]
        decided = lost.any(axis=0)
        finished = decided | out.all(axis=0)
        ended = finished | (self.remaining <= 0.0)
        phi = shaping * (margin[0] - margin[1]) / half
        shaped = phi - self._phi
        self._phi = phi
        reward = np.stack([shaped, -shaped])
        obs = self._observe()
        if not ended.any():
            return obs, reward, None
        return self._end(np.flatnonzero(ended), lost, finished, obs, reward)

    def _collide(
        self, new: np.ndarray, move: np.ndarray, contact: np.ndarray, push: np.ndarray
    ) -> None:
        """Pairs closer than the contact distance push each other, then stand apart at it."""
        diff = new[1] - new[0]
        dist = np.sqrt(diff[:, 0] * diff[:, 0] + diff[:, 1] * diff[:, 1])
        touching = dist < contact
        self.contact[...] = touching
        if not touching.any():
            return
        idx = np.flatnonzero(touching)
        d = dist[idx]
        unit = np.where((d > 0)[:, None], diff[idx] / np.maximum(d, 1e-12)[:, None], [1.0, 0.0])
        unit = unit.astype(F32)
        ahead = np.maximum((move[0, idx] * unit).sum(axis=1), 0.0)
        back = np.maximum(-(move[1, idx] * unit).sum(axis=1), 0.0)
        shift = push[idx] * (ahead - back)
        apart = (contact[idx] - d) * F32(0.5)
        new[0, idx] += unit * (shift - apart)[:, None]
        new[1, idx] += unit * (shift + apart)[:, None]

    def _end(
        self,
        idx: np.ndarray,
        lost: np.ndarray,
        finished: np.ndarray,
        obs: np.ndarray,
        reward: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, Games]:
        """Report the games of areas idx (the result as their final reward), start new ones.

        Only a time-out is interrupted: a game decided, or drawn with both agents out, ended.
        """
        result = lost[1, idx].astype(F32) - lost[0, idx].astype(F32)
        final = np.stack([result, -result])
        games = Games(idx.astype(np.int32), obs[:, idx], final, ~finished[idx])
        if self._record is not None:
            decided: np.ndarray = lost[0, idx] | lost[1, idx]
            self._record(decided, self._table[5, idx] - self.remaining[idx])
        reward[:, idx] = 0.0
        self._spawn(idx)
        return self._observe(), reward, games

    def _spawn(self, idx: np.ndarray) -> None:
        """New games in areas idx with the pending parameters: agents at c and -c."""
        self._table[:, idx] = self._columns(self._pending)[:, None]
        u = uniforms(self._keys[idx], self._episode[idx], self.DRAWS)
        self._episode[idx] += np.uint64(1)
        half = self._table[0, idx]
        radius = half * (F32(0.3) + F32(0.4) * u[:, 0])
        angle = u[:, 1] * F32(2.0 * math.pi)
        centre = np.stack([np.cos(angle), np.sin(angle)], axis=1).astype(F32) * radius[:, None]
        self.pos[0, idx] = centre
        self.pos[1, idx] = -centre
        self.vel[:, idx] = 0.0
        self.contact[idx] = 0.0
        self.remaining[idx] = self._table[5, idx]
        self._shrink(idx)
        self._phi[idx] = 0.0

    def _shrink(self, idx: np.ndarray) -> None:
        """The current half side of areas idx: its floor plus its shrink per step left."""
        self.half[idx] = self._table[8, idx] * self.remaining[idx] + self._table[7, idx]

    def _observe(self) -> np.ndarray:
        """(2, n, 10) float32 observations, each team's in its own frame."""
        half, speed = self.half, np.hypot(self._table[1], self._table[2])
        obs = np.empty((TEAMS, self.num_areas, OBS_SIZE), F32)
        inv_half, inv_speed = (1.0 / half)[:, None], (1.0 / speed)[:, None]
        obs[:, :, 0:2] = self.pos * inv_half
        obs[:, :, 2:4] = self.vel * inv_speed
        obs[:, :, 4:6] = (self.pos[::-1] - self.pos) * inv_half
        obs[:, :, 6:8] = self.vel[::-1] * inv_speed
        obs[:, :, 8] = self.contact
        obs[:, :, 9] = self.remaining / self._table[5]
        return obs


SUMO = Family(
    name="Sumo",
    params_type=SumoParams,
    core_type=SumoCore,
    train_ranges={
        **SHARED_TRAIN_RANGES,
        "arena_size": ((3.5, 4.5),),
        "target_radius": ((0.7, 0.85),),
        "push_strength": ((0.75, 1.25),),
        "arena_shrink": ((0.9, 1.0),),
    },
    test_ranges={
        **SHARED_TEST_RANGES,
        "arena_size": ((3.0, 3.5), (4.5, 5.5)),
        "target_radius": ((0.6, 0.7),),
        "push_strength": ((0.5, 0.75), (1.25, 1.5)),
        "arena_shrink": ((0.75, 0.9),),
    },
    teams=TEAMS,
)
