"""Built-in tasks, FindTarget and CarryObject, behind mlagents_envs' BaseEnv."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envs.carry_object import CARRY_OBJECT
from envs.family import Family
from envs.find_target import FIND_TARGET

if TYPE_CHECKING:
    from envs.adapter import TaskEnv

__all__ = ["BEHAVIOR_NAME", "FAMILIES", "Family", "family", "make"]

BEHAVIOR_NAME = "Brain"
FAMILIES: dict[str, Family] = {f.name: f for f in (FIND_TARGET, CARRY_OBJECT)}


def family(name: str) -> Family:
    """The task family called `name`; ValueError naming it if there is none."""
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r} (known: {', '.join(FAMILIES)})") from None


def make(name: str, *, num_areas: int = 1, seed: int = 0, **params: float) -> TaskEnv:
    """A `name` task (a BaseEnv) with `num_areas` areas, area i seeded seed + i; params checked."""
    from envs.adapter import TaskEnv

    return TaskEnv(family(name), num_areas=num_areas, seed=seed, params=params)
