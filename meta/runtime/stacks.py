"""Jobs whose training requests share their settings train as one stack, wherever they run.

Jobs that are a training request (meta.runtime.jobs.TrainingJob: meta-train's inner trainings,
meta-eval's adaptations) and share their settings (meta.algorithm.training.stack_key) train in
lockstep as one stack, up to MAX_STACK at once (BUILD_STACK on builds, each member stepping a
build of its own); every other job runs alone. Results come in the jobs' order. `Stacked` is a
stack's share as one job, for a worker process or a Ray actor to train.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from meta.algorithm.ppo.network import near_equal
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.request import TrainResult
from meta.algorithm.training import stack_key, train_requests
from meta.runtime.envpool import BUILD_STACK, EnvPool
from meta.runtime.jobs import FinishedTogether, Job, TrainingJob, request_env

R = TypeVar("R")
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
