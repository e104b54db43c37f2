"""Built-in tasks, FindTarget, CarryObject and the game Sumo, behind mlagents_envs' BaseEnv."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envs.constants import BEHAVIOR_NAME
from envs.tasks.carry_object import CARRY_OBJECT
from envs.tasks.family import Family
from envs.tasks.find_target import FIND_TARGET
from envs.tasks.sumo import SUMO

if TYPE_CHECKING:
    from envs.tasks.adapter import TaskEnv
    from envs.tasks.teams import TeamTaskEnv

__all__ = ["BEHAVIOR_NAME", "DEFAULT_BUILDS", "FAMILIES", "Family", "family", "make"]

FAMILIES: dict[str, Family] = {f.name: f for f in (FIND_TARGET, CARRY_OBJECT, SUMO)}
"""Every task family by name: a new family is a module of envs/tasks/ and its entry here."""
DEFAULT_BUILDS = {name: f"envs/builds/{name}" for name in FAMILIES}
"""Each family's launchable build, relative to the project root (`env.path`'s default)."""


def family(name: str) -> Family:
    """The task family called `name`; ValueError naming it if there is none."""
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r} (known: {', '.join(FAMILIES)})") from None


def make(name: str, *, num_areas: int = 1, seed: int = 0, **params: float) -> TaskEnv | TeamTaskEnv:
    """A `name` task (a BaseEnv) with `num_areas` areas, area i seeded seed + i; params checked.

    A game of teams (Sumo) has the behaviors `Brain?team=0` and `Brain?team=1`.
    """
    from envs.tasks.adapter import TaskEnv
    from envs.tasks.teams import TeamTaskEnv

    chosen = family(name)
    if chosen.adversarial:
        return TeamTaskEnv(chosen, num_areas=num_areas, seed=seed, params=params)
    return TaskEnv(chosen, num_areas=num_areas, seed=seed, params=params)
