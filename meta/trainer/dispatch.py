"""A meta-step's inner trainings: the meta-learner's requests, run by an executor, retried.

The requests are picklable (meta.algorithm.request) and run in this process (`runtime=local`)
or on Ray actors (`runtime=ray`). Independent requests train as stacks; a chain (Adam's
state carried from training to training) runs one after the other, each request continuing
what the previous one left. `InnerTrainings.trainings` says which jobs a meta-step needs and
takes their results, so that whoever runs them may run other runs' jobs beside them
(meta.trainer.seeds); `run` runs them on the run's own executor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from functools import partial
from typing import TypeVar

import torch

from meta.algorithm.learner import MetaLearner
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.reptile import Task
from meta.algorithm.request import OptimizerState, SelfPlayState, TrainResult
from meta.errors import first_line
from meta.runtime.executor import Executor, make_executor
from meta.runtime.jobs import Training
from meta.trainer.preflight import TrainingPlan

log = logging.getLogger(__name__)
J = TypeVar("J")
S = TypeVar("S")
T = TypeVar("T")


def drive(steps: Generator[J, S, T], run: Callable[[J], S]) -> T:
    """Run what `steps` yields with `run`, sending each answer back; what `steps` returns."""
    try:
        jobs = next(steps)
        while True:
            jobs = steps.send(run(jobs))
    except StopIteration as done:
        return done.value


class BuildsExhausted(RuntimeError):
    """Builds crashed more often than env.max_restarts allows (one line)."""


class InnerTrainings:
    """Runs each meta-step's requests of the run's meta-learner; counts restarts of builds."""

    def __init__(self, plan: TrainingPlan, learner: MetaLearner, timers: Timers) -> None:
        self.plan, self.cfg, self.learner, self.timers = plan, plan.cfg, learner, timers
        self.restarts = 0
        self._executor: Executor | None = None

    def start_executor(self) -> Executor:
        """Where the requests run, started on the first call (Ray's actors with the first step)."""
        if self._executor is None:
            runtime = self.cfg.runtime
            self._executor = make_executor(
                runtime, self.cfg.env, runtime.workers, self.plan.pool, self.timers
            )
            if self.cfg.runtime.backend == "ray":
                self.plan.pool.close()  # the actors own the environments; drop the driver's builds
            if self.learner.chained:
                log.info("the inner trainings chain Adam's state: one after the other")
        return self._executor

    def trainings(
        self,
        k: int,
        theta: dict[str, torch.Tensor],
        tasks: list[Task],
        hyper: Hyper,
        optimizer_state: OptimizerState | None = None,
        self_play_state: SelfPlayState | None = None,
    ) -> Generator[list[Training], list[TrainResult], list[TrainResult]]:
        """The meta-step's trainings as job lists to run, each sent back its results in order:
        one list of independent trainings, or one list per link of a chain; returns them all."""
        requests = self.learner.requests(k, theta, tasks, hyper, self_play_state)
        if not self.learner.chained:
            return (yield [Training(r) for r in requests])
        results: list[TrainResult] = []
        for request in requests:
            if results:
                request = self.learner.continued(request, results[-1])
            else:
                request = request.carrying(optimizer_state=optimizer_state)
            results += yield [Training(request)]
        return results

    def run(self, k: int, jobs: list[Training]) -> list[TrainResult]:
        """Meta-step k's jobs on the run's executor, results in order."""
        return list(self.start_executor().run(jobs, partial(self.crashed, k)))

    def crashed(self, k: int, crash: BaseException) -> None:
        """Count a crash; BuildsExhausted once env.max_restarts is spent."""
        self.restarts += 1
        if self.restarts > self.cfg.env.max_restarts:
            raise BuildsExhausted(
                f"builds crashed {self.restarts} times (env.max_restarts="
                f"{self.cfg.env.max_restarts}); last: {crash}"
            ) from crash
        what = (
            "A Ray actor was lost"
            if type(crash).__module__.startswith("ray")
            else "A build crashed"
        )
        log.warning(
            "%s in meta-step %d (%s); restarting it and retrying its inner training from theta",
            what,
            k,
            first_line(crash),
        )

    def close(self) -> None:
        """Release the executor's workers (the run closes its own pool)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
