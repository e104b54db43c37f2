"""The scratch baseline: plain PPO on one task, the joint run's chunks on that task alone."""

from __future__ import annotations

import numpy as np

from meta.algorithm.learners.joint import Joint
from meta.algorithm.reptile import Task, TaskSampler
from meta.config import Config

_SINGLE = 0x51A6


class Single(Joint):
    """One task for the whole run, drawn once from the seed; otherwise joint's one PPO run."""

    name = "single"

    @classmethod
    def check(cls, cfg: Config) -> None:
        """Any backend, games too (one task has its areas to itself)."""

    @property
    def task_count(self) -> int:
        """One task per meta-step."""
        return 1

    def _task(
        self, sampler: TaskSampler, rng: np.random.Generator, env_params: dict[str, float]
    ) -> Task:
        sampler.sample(rng)  # the meta-step's draw, as every learner makes it
        task = sampler.sample(np.random.default_rng([self.cfg.seed, _SINGLE]))
        return Task(task.family, {**task.params, **env_params})
