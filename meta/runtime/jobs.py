"""The jobs every executor runs: a training request, or a call of a top-level function.

A job is picklable and runs with the environment pool and timers of whichever process runs it,
so the same job gives the same result in this process, a worker process or a Ray actor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from envs.interface import TaskEnvironment
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.training import train
from meta.runtime.envpool import EnvPool

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Job(Protocol[R_co]):
    """Something an executor runs: picklable, given the running process's pool and timers."""

    def __call__(self, pool: EnvPool, timers: Timers) -> R_co:
        """The job's result."""
        ...


@runtime_checkable
class TrainingJob(Protocol[R_co]):
    """A job that is one training request and a last step on its result: what can stack."""

    def training(self) -> TrainRequest:
        """The request to train."""
        ...

    def finish(self, pool: EnvPool, result: TrainResult) -> R_co:
        """The job's result from its training's."""
        ...


@runtime_checkable
class FinishedTogether(Protocol):
    """A training job whose last steps over a whole stack's results run as one."""

    @staticmethod
    def finish_together(
        pool: EnvPool, jobs: Sequence[Any], results: Sequence[TrainResult]
    ) -> list[Any]:
        """Each job's `finish(pool, result)`, in order."""
        ...


@dataclass(frozen=True)
class Training:
    """meta-train's job: one training request, on an environment of the process's pool."""

    request: TrainRequest

    def __call__(self, pool: EnvPool, timers: Timers) -> TrainResult:
        """The request's result."""
        return run_request(self.request, pool, timers)

    def training(self) -> TrainRequest:
        """The request."""
        return self.request

    def finish(self, pool: EnvPool, result: TrainResult) -> TrainResult:
        """The training's result itself."""
        return result

    def starting_from(self, weights: Weights) -> Training:
        """The same training from other start weights (Ray sends a shared start once)."""
        return Training(replace(self.request, weights=weights))


@dataclass(frozen=True)
class Call(Generic[R]):
    """`fn(arg)` for a picklable top-level `fn` that makes its own environments (meta-eval's)."""

    fn: Callable[[Any], R]
    arg: Any

    def __call__(self, pool: EnvPool, timers: Timers) -> R:
        """fn(arg); the process's pool is not used."""
        return self.fn(self.arg)


def run_request(request: TrainRequest, pool: EnvPool, timers: Timers) -> TrainResult:
    """Train the request in an environment of `pool`; release the environment after."""
    env = request_env(pool, request)
    try:
        with timers.scope("inner_training"):
            return train(request, env, timers)
    finally:
        pool.release(env)


def request_env(pool: EnvPool, request: TrainRequest, member: int = 0) -> TaskEnvironment:
    """The request's task's environment, or all its tasks' areas side by side (joint); on
    builds, those of stack member `member`."""
    tasks, seed = request.tasks, request.seed
    if len(tasks) > 1:
        return pool.concat([(t.family, t.params) for t in tasks], seed, member)
    return pool.env(tasks[0].family, tasks[0].params, seed, member=member)
