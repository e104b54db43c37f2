"""The jobs every executor runs, and the training jobs that share their settings as one stack.

A job is picklable (a training request, or a call of a top-level function) and runs with the
environment pool and timers of whichever process runs it, so the same job gives the same result
in this process, a worker process or a Ray actor. Jobs that are a training request (`TrainingJob`:
meta-train's inner trainings, meta-eval's adaptations) and share their settings
(meta.algorithm.training.stack_key) train in lockstep as one stack, up to MAX_STACK at once
(BUILD_STACK on builds, each member stepping a build of its own); every other job runs alone.
Results come in the jobs' order. `Stacked` is a stack's share as one job, for a worker process or
a Ray actor to train.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from envs.interface import TaskEnvironment
from meta.algorithm.ppo.network import near_equal
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.training import stack_key, train, train_requests
from meta.runtime.envpool import BUILD_STACK, EnvPool

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


MAX_STACK = 64
"""Trainings in one stack at most (memory grows with it; the gain has levelled off by then)."""
OnCrash = Callable[[BaseException], None]
"""Told of every crash before its job is retried; raises to give up."""


def give_up(crash: BaseException) -> None:
    """The default: a crash ends the run of jobs with its own error."""
    raise crash


def run_jobs(
    jobs: Sequence[Job[R]],
    pool: EnvPool,
    timers: Timers,
    compiled: bool = False,
    on_crash: OnCrash = give_up,
) -> Iterator[R]:
    """Every job's result in this process, in order: each stack trained as one (`compiled`:
    runtime.compile), other jobs one by one; a crashed build is relaunched after
    `on_crash(error)` and its job (or stack) retried from its start."""
    crash_types = pool.crash_types()
    results: dict[int, R] = {}
    given = 0
    for where, job in units(jobs, 1, compiled, pool.cfg.backend != "native"):
        while True:
            try:
                got = job(pool, timers)
                break
            except crash_types as crash:
                on_crash(crash)
                pool.restart_all()
        results.update(zip(where, got if isinstance(job, Stacked) else [got], strict=True))
        while given in results:
            yield results.pop(given)
            given += 1


def train_stack(pool: EnvPool, timers: Timers, jobs: Sequence[Job[R]], compiled: bool) -> list[R]:
    """The results of training jobs that stack, trained as one stack (member i on its own
    environment of the pool).

    Jobs that finish together (meta-eval's) are self-contained: on builds, their stack runs on
    builds of its own, each member's launched with its own seed, as each job alone would."""
    own = pool.cfg.backend != "native" and isinstance(jobs[0], FinishedTogether)
    where = EnvPool.claiming(pool.cfg) if own else pool
    try:
        requests = [job.training() for job in jobs]  # type: ignore[attr-defined]
        envs = [request_env(where, r, member) for member, r in enumerate(requests)]
        try:
            with timers.scope("inner_training"):
                trained = train_requests(requests, envs, timers, compiled=compiled)
        finally:
            for env in envs:
                where.release(env)
        return finish(where, jobs, trained)
    finally:
        if own:
            where.close()


def finish(pool: EnvPool, jobs: Sequence[Job[R]], trained: Sequence[TrainResult]) -> list[R]:
    """Each job's result from its training's (member i's on its own environments of `pool`):
    at once where the jobs finish together."""
    kind = type(jobs[0])
    if isinstance(jobs[0], FinishedTogether) and all(type(job) is kind for job in jobs):
        return jobs[0].finish_together(pool, jobs, trained)
    return [
        job.finish(pool.for_member(i), r)  # type: ignore[attr-defined]
        for i, (job, r) in enumerate(zip(jobs, trained, strict=True))
    ]


@dataclass(frozen=True)
class Stacked:
    """Jobs that stack together, as one job: their results, in order, trained as one stack."""

    jobs: tuple[Job[Any], ...]
    compiled: bool = False
    """runtime.compile, where the share trains."""

    def __call__(self, pool: EnvPool, timers: Timers) -> list[Any]:
        """Every job's result, in order."""
        return train_stack(pool, timers, self.jobs, self.compiled)


def shares(group: Sequence[int], parts: int) -> list[list[int]]:
    """`group` cut into `parts` contiguous shares whose sizes differ by one at most (none empty)."""
    return [list(group[part]) for part in near_equal(len(group), parts)]


def stacks(jobs: Sequence[Job[R]], builds: bool = False) -> list[list[int]]:
    """Indices of the jobs that train together, each list one stack of 2 or more.

    More than MAX_STACK jobs of one setting (BUILD_STACK on `builds`) split into stacks of
    near-equal size, so that none is left to train alone (a member trains bitwise the same in
    any stack of 2 or more).
    """
    groups: list[tuple[tuple[object, ...], list[int]]] = []
    for i, job in enumerate(jobs):
        if not isinstance(job, TrainingJob):
            continue
        key = stack_key(job.training())
        for shared, members in groups:
            if shared == key:
                members.append(i)
                break
        else:
            groups.append((key, [i]))
    most = BUILD_STACK if builds else MAX_STACK
    return [
        part
        for _, members in groups
        if len(members) > 1
        for part in shares(members, -(-len(members) // most))
    ]


Unit = tuple[list[int], Job[Any]]
"""A job a worker runs and the positions of the results it gives: one, or a Stacked share's."""


def units(
    jobs: Sequence[Job[Any]], parts: int, compiled: bool = False, builds: bool = False
) -> list[Unit]:
    """Each job alone, but each stack cut into up to `parts` shares of 2 or more, each one
    Stacked job (so `parts` workers train a stack side by side; `compiled`: runtime.compile);
    in the order of first jobs.

    No share holds one member: it would train unstacked, on other kernels than in a stack."""
    together = [s for g in stacks(jobs, builds) for s in shares(g, max(min(parts, len(g) // 2), 1))]
    first = {share[0]: share for share in together}
    inside = {i for share in together for i in share}
    out: list[Unit] = []
    for i, job in enumerate(jobs):
        if i in first:
            out.append((first[i], Stacked(tuple(jobs[j] for j in first[i]), compiled)))
        elif i not in inside:
            out.append(([i], job))
    return out
