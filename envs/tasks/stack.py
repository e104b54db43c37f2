"""Several built-in environments of one family stepped as one core over all their areas.

Member i's areas are areas i·n .. (i+1)·n − 1 of the stacked core, with member i's keys,
episode counters, parameters and state, so every area steps exactly as it does in its own
environment (the cores' operations are per area). The members' environments are not stepped
while stacked; `release` writes the state back into each, as if each had taken the steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from envs.tasks.adapter import TaskEnv
from envs.tasks.concat import ConcatEnv
from envs.tasks.core import BatchedTask, Ended


def parts(env: object) -> list[TaskEnv] | None:
    """The built-in tasks an environment is, side by side (a ConcatEnv's children); None if it
    is not made of built-in tasks of one size."""
    found = list(env.children) if isinstance(env, ConcatEnv) else [env]
    tasks = [e for e in found if isinstance(e, TaskEnv)]
    if len(tasks) != len(found) or len({e.num_areas for e in tasks}) != 1:
        return None
    return tasks


def stackable_envs(envs: Sequence[object]) -> bool:
    """Whether every environment is built-in tasks side by side, in the same numbers and sizes."""
    found = [parts(e) for e in envs]
    shapes = {(len(p), p[0].num_areas) if p is not None else None for p in found}
    return None not in shapes and len(shapes) == 1


class CoreStack:
    """The cores of k built-in environments of one family as one core of k·n areas."""

    def __init__(self, envs: Sequence[TaskEnv]) -> None:
        cores = [env.core for env in envs]
        kind = type(cores[0])
        if any(type(c) is not kind for c in cores) or len({e.num_areas for e in envs}) != 1:
            raise ValueError("a core stack needs environments of one family and size")
        self.envs, self.cores = list(envs), cores
        self.n = envs[0].num_areas
        self.core: BatchedTask = kind(cores[0].params, len(cores) * self.n, 0, self._note)
        for name in kind.STATE:
            getattr(self.core, name)[...] = np.concatenate([getattr(c, name) for c in cores], -1)
        self._won: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._areas: list[np.ndarray] = []
        self._last: tuple[np.ndarray, np.ndarray, Ended | None] | None = None

    def observe(self) -> np.ndarray:
        """Every area's current observation, (k·n, obs)."""
        return self.core.observe()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, Ended | None]:
        """Step every area with its (k·n, 2) clipped moves; the core's results, ids over k·n."""
        obs, reward, ended = self.core.step(action)
        if ended is not None:
            self._areas.append(ended.agent_id)
        self._last = (obs, reward, ended)
        return obs, reward, ended

    def _note(self, won: np.ndarray, length: np.ndarray) -> None:
        # the core records exactly the areas it then reports ended, in that order
        self._won.append(won)
        self._lengths.append(length)

    def deliver(self) -> None:
        """Hand each member's stats channel the episodes its areas ended since the last call."""
        if not self._won:
            return
        won, length = np.concatenate(self._won), np.concatenate(self._lengths)
        member = np.concatenate(self._areas) // self.n
        for pending in (self._won, self._lengths, self._areas):
            pending.clear()
        for i, env in enumerate(self.envs):
            mine = member == i
            if mine.any():
                env.stats_channel.record(won[mine], length[mine])

    def release(self) -> None:
        """Write each area's state back into its member, with the last step's results."""
        self.deliver()
        obs, reward, ended = self._last if self._last is not None else (None, None, None)
        for i, (env, core) in enumerate(zip(self.envs, self.cores, strict=True)):
            part = slice(i * self.n, (i + 1) * self.n)
            for name in type(core).STATE:
                getattr(core, name)[...] = getattr(self.core, name)[..., part]
            if obs is None or reward is None:
                continue
            mine = None
            if ended is not None:
                rows = (ended.agent_id >= part.start) & (ended.agent_id < part.stop)
                if rows.any():
                    ids = (ended.agent_id[rows] - part.start).astype(np.int32)
                    mine = Ended(ids, ended.obs[rows], ended.reward[rows], ended.interrupted[rows])
            env.adopt(obs[part].copy(), reward[part].copy(), mine)
