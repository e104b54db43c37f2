"""Where a meta-step's inner trainings run: this process, one after the other, or Ray actors.

An executor trains a list of jobs from θ and returns their results in the jobs' order. A job
whose environment crashed (a build died, an actor was lost) is retried from θ after
`on_crash(error)`, which counts the crash and raises once `env.max_restarts` is spent, so a
meta-step either gets every result or none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from meta.algorithm.inner import InnerResult
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.ppo.weights import Weights
from meta.config import Config
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import InnerJob, run_job

OnCrash = Callable[[BaseException], None]
"""Told of every crash before its job is retried; raises to give up."""


class InnerExecutor(Protocol):
    """Trains jobs from θ; results in the order of `jobs`."""

    def run(self, theta: Weights, jobs: Sequence[InnerJob], on_crash: OnCrash) -> list[InnerResult]:
        """Every job's result, in order; crashed jobs retried from theta."""
        ...

    def close(self) -> None:
        """Release workers and their environments."""
        ...


class LocalExecutor:
    """Every job in this process, on the run's environment pool."""

    def __init__(self, pool: EnvPool, timers: Timers) -> None:
        self.pool, self.timers = pool, timers

    def run(self, theta: Weights, jobs: Sequence[InnerJob], on_crash: OnCrash) -> list[InnerResult]:
        """Every job's result, in order; a crashed build is relaunched and its job retried."""
        crash_types = self.pool.crash_types()
        results = []
        for job in jobs:
            while True:
                try:
                    results.append(run_job(job, theta, self.pool, self.timers))
                    break
                except crash_types as crash:
                    on_crash(crash)
                    self.pool.restart_all()
        return results

    def close(self) -> None:
        """The pool belongs to the run, which closes it."""


def make_executor(cfg: Config, pool: EnvPool, timers: Timers) -> InnerExecutor:
    """The executor `runtime.backend` names (Ray must already be connected for `ray`)."""
    if cfg.runtime.backend == "ray":
        from meta.runtime.actors import RayExecutor

        return RayExecutor(cfg.runtime, cfg.env, pool.log_folder)
    return LocalExecutor(pool, timers)
