"""FindTarget: reach the target in a square arena (in hidden-goal mode, an unseen fixed spot)."""

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
    pick_far,
    spread,
)
from envs.tasks.family import SHARED_TEST_RANGES, SHARED_TRAIN_RANGES, Family, TaskParams, param

HIDDEN, GOAL_XY = COMMON, slice(COMMON + 1, COMMON + 3)


@dataclass(frozen=True)
class FindTargetParams(TaskParams):
    """FindTarget's parameters: the shared ones plus the hidden-goal mode."""

    hidden_goal: float = param(
        0, 0, 1, "1: the target is unobserved and sits at (goal_x, goal_y)", integer=True
    )
    goal_x: float = param(0.5, -1.0, 1.0, "hidden target x, as a fraction of half the arena")
    goal_y: float = param(0.5, -1.0, 1.0, "hidden target y, as a fraction of half the arena")


class FindTargetCore(BatchedTask[FindTargetParams]):
    """Agent and target spawn apart; reaching the target within target_radius is success."""

    DRAWS = 2 * (1 + CANDIDATES)

    def _objective_visible(self, params: FindTargetParams) -> bool:
        return params.hidden_goal == 0

    def _family_rows(self, params: FindTargetParams) -> list[float]:
        half = params.arena_size / 2
        return [params.hidden_goal, params.goal_x * half, params.goal_y * half]

    def _place(
        self, idx: np.ndarray, p: np.ndarray, u: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        points = spread(u, p[HALF] * F32(SPAWN_EXTENT))
        agent, candidates = points[:, 0], points[:, 1:]
        apart = p[RADIUS] * F32(2.0)
        rest = np.zeros(len(idx), F32)
        hidden = p[HIDDEN] != 0
        if not hidden.any():
            return agent, pick_far(candidates, agent, apart), rest
        # hidden goals: the target is the area's goal and the agent spawns away from it
        objective = p[GOAL_XY].T.copy()
        seen = ~hidden
        objective[seen] = pick_far(candidates[seen], agent[seen], apart[seen])
        agent = agent.copy()
        agent[hidden] = pick_far(candidates[hidden], objective[hidden], apart[hidden])
        return agent, objective, rest


FIND_TARGET = Family(
    name="FindTarget",
    params_type=FindTargetParams,
    core_type=FindTargetCore,
    train_ranges={
        **SHARED_TRAIN_RANGES,
        "target_radius": ((0.8, 1.2),),
        # hidden goals: a 3 x 3 grid of patches; the held-out goals lie between them
        "goal_x": ((-0.8, -0.55), (-0.15, 0.15), (0.55, 0.8)),
        "goal_y": ((-0.8, -0.55), (-0.15, 0.15), (0.55, 0.8)),
    },
    test_ranges={
        **SHARED_TEST_RANGES,
        "target_radius": ((0.6, 0.8),),
        "goal_x": ((-0.55, -0.15), (0.15, 0.55)),
        "goal_y": ((-0.55, -0.15), (0.15, 0.55)),
    },
)
