"""CarryObject: reach the object (picked up on contact), carry it, slowed, to the goal zone."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.tasks.core import (
    CANDIDATES,
    COMMON,
    F32,
    HALF,
    RADIUS,
    SPAWN_EXTENT,
    BatchedTask,
    Record,
    norm,
    pick_far,
    spread,
)
from envs.tasks.family import SHARED_TEST_RANGES, SHARED_TRAIN_RANGES, Family, TaskParams, param

CARRY, GOAL_RADIUS = COMMON, COMMON + 1


@dataclass(frozen=True)
class CarryObjectParams(TaskParams):
    """CarryObject's parameters: the shared ones plus the carrying slow-down and goal zone."""

    max_step: float = param(
        200, 1, 1_000_000, "steps before an episode is interrupted", integer=True
    )
    carry_speed: float = param(0.7, 0.05, 1.0, "speed multiplier while carrying the object")
    goal_radius: float = param(1.25, 0.05, 250.0, "radius of the goal zone")

    def check(self) -> None:
        """Raise ValueError when parameters contradict each other."""
        super().check()
        if self.goal_radius > self.arena_size / 4:
            raise ValueError(
                f"goal_radius={self.goal_radius:g} exceeds arena_size/4 ({self.arena_size / 4:g})"
            )


class CarryObjectCore(BatchedTask[CarryObjectParams]):
    """Two phases per episode: to the object, then (holding it) to the goal zone.

    The shaping potential is the remaining path, agent-object-goal and then agent-goal, so
    picking the object up changes it by at most 2 * target_radius, not by a whole leg.
    """

    DRAWS = 2 * (1 + 2 * CANDIDATES)

    STATE = (*BatchedTask.STATE, "holding")

    def __init__(
        self, params: CarryObjectParams, num_areas: int, seed: int, record: Record | None = None
    ) -> None:
        super().__init__(params, num_areas, seed, record)
        self.holding = np.zeros(num_areas, bool)

    def _family_rows(self, params: CarryObjectParams) -> list[float]:
        return [params.carry_speed, params.goal_radius]

    def _place(
        self, idx: np.ndarray, p: np.ndarray, u: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        points = spread(u, p[HALF] * F32(SPAWN_EXTENT))
        agent = points[:, 0]
        obj = pick_far(points[:, 1 : 1 + CANDIDATES], agent, p[RADIUS] * F32(2.0))
        goal = pick_far(points[:, 1 + CANDIDATES :], obj, p[RADIUS] + p[GOAL_RADIUS])
        self.goal[:, idx] = goal.T
        self._goal_diff[:, idx] = (goal - agent).T
        self._holding[idx] = 0.0
        self.holding[idx] = False
        return agent, obj, norm(goal - obj)

    def _progress(self, reached: np.ndarray) -> np.ndarray:
        success = reached & self.holding
        pickup = reached > self.holding
        if pickup.any():
            self._pick_up(np.flatnonzero(pickup))
        return success

    def _pick_up(self, idx: np.ndarray) -> None:
        """Areas idx hold the object from now on: the goal is their objective, they slow down."""
        self.holding[idx] = True
        self._holding[idx] = 1.0
        self.objective[:, idx] = self.goal[:, idx]
        self.radius[idx] = self._p[GOAL_RADIUS, idx]
        self._drive[:, idx] *= self._p[CARRY, idx]
        self.rest[idx] = 0.0
        self._measure()

    def _track(self) -> None:
        np.subtract(self.goal, self.pos, out=self._goal_diff)


CARRY_OBJECT = Family(
    name="CarryObject",
    params_type=CarryObjectParams,
    core_type=CarryObjectCore,
    train_ranges={
        **SHARED_TRAIN_RANGES,
        "carry_speed": ((0.55, 0.85),),
        "goal_radius": ((1.0, 1.5),),
    },
    test_ranges={
        **SHARED_TEST_RANGES,
        "carry_speed": ((0.4, 0.55),),
        "goal_radius": ((0.75, 1.0),),
    },
)
