"""Where training requests run: this process, one after the other, or Ray actors.

An executor runs a list of requests and returns their results in the requests' order. A
request whose environment crashed (a build died, an actor was lost) is retried from its start
after `on_crash(error)`, which counts the crash and raises once `env.max_restarts` is spent, so
a meta-step either gets every result or none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.request import TrainRequest, TrainResult
from meta.config import Config
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import run_request

OnCrash = Callable[[BaseException], None]
"""Told of every crash before its request is retried; raises to give up."""


class InnerExecutor(Protocol):
    """Runs training requests; results in the order of `requests`."""

    def run(self, requests: Sequence[TrainRequest], on_crash: OnCrash) -> list[TrainResult]:
        """Every request's result, in order; crashed ones retried from their start."""
        ...

    def close(self) -> None:
        """Release workers and their environments."""
        ...


class LocalExecutor:
    """Every request in this process, on the run's environment pool."""

    def __init__(self, pool: EnvPool, timers: Timers) -> None:
        self.pool, self.timers = pool, timers

    def run(self, requests: Sequence[TrainRequest], on_crash: OnCrash) -> list[TrainResult]:
        """Every result, in order; a crashed build is relaunched and its request retried."""
        crash_types = self.pool.crash_types()
        results = []
        for request in requests:
            while True:
                try:
                    results.append(run_request(request, self.pool, self.timers))
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
