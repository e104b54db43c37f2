"""runtime=batched and eval.batched: jobs whose training requests stack train as one network.

Jobs that are a training request (meta.runtime.jobs.TrainingJob: meta-train's inner trainings,
meta-eval's adaptations) and share their settings (meta.algorithm.training.stack_key) train in
lockstep as one stack, up to MAX_STACK at once; every other job runs alone in this process, as
LocalExecutor runs it. Results come in the jobs' order. The native tasks only: a build's
environments are its workers, which a stack would have to share.
`Stacked` is such a run as one job, for a Ray actor (runtime.stack) or a worker process
(eval.batched with eval.workers) to train its share.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from meta.algorithm.ppo.network import near_equal
from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.algorithm.request import TrainResult
from meta.algorithm.training import stack_key, train_requests
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import OnCrash, give_up
from meta.runtime.jobs import FinishedTogether, Job, TrainingJob, request_env

R = TypeVar("R")
MAX_STACK = 64
"""Trainings in one stack at most (memory grows with it; the gain has levelled off by then)."""


class BatchedExecutor:
    """Stackable training requests in stacks of the same settings; other jobs one by one."""

    def __init__(self, pool: EnvPool, timers: Timers | None = None, compiled: bool = False) -> None:
        """`compiled` (runtime.compile): every stack's update through torch.compile's kernels."""
        self.pool, self.timers, self.compiled = pool, timers or NullTimers(), compiled

    def run(self, jobs: Sequence[Job[R]], on_crash: OnCrash = give_up) -> Iterator[R]:
        """Every result, in order (native environments do not crash: `on_crash` is not told)."""
        results: dict[int, R] = {}
        for group in stacks(jobs):
            stacked = [jobs[i] for i in group]
            requests = [job.training() for job in stacked]  # type: ignore[attr-defined]
            envs = [request_env(self.pool, r) for r in requests]
            try:
                with self.timers.scope("inner_training"):
                    trained = train_requests(requests, envs, self.timers, compiled=self.compiled)
            finally:
                for env in envs:
                    self.pool.release(env)
            for i, result in zip(group, finish(self.pool, stacked, trained), strict=True):
                results[i] = result
        for i, job in enumerate(jobs):
            yield results[i] if i in results else job(self.pool, self.timers)

    def close(self) -> None:
        """The pool belongs to whoever made it."""


def finish(pool: EnvPool, jobs: Sequence[Job[R]], trained: Sequence[TrainResult]) -> list[R]:
    """Each job's result from its training's: at once where the jobs finish together."""
    kind = type(jobs[0])
    if isinstance(jobs[0], FinishedTogether) and all(type(job) is kind for job in jobs):
        return jobs[0].finish_together(pool, jobs, trained)
    return [job.finish(pool, r) for job, r in zip(jobs, trained, strict=True)]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Stacked:
    """Jobs that stack together, as one job: their results, in order, trained as one stack."""

    jobs: tuple[Job[Any], ...]
    compiled: bool = False
    """runtime.compile, where the share trains."""

    def __call__(self, pool: EnvPool, timers: Timers) -> list[Any]:
        """Every job's result, in order."""
        return list(BatchedExecutor(pool, timers, self.compiled).run(self.jobs))


def shares(group: Sequence[int], parts: int) -> list[list[int]]:
    """`group` cut into `parts` contiguous shares whose sizes differ by one at most (none empty)."""
    return [list(group[part]) for part in near_equal(len(group), parts)]


def stacks(jobs: Sequence[Job[R]]) -> list[list[int]]:
    """Indices of the jobs that train together, each list one stack of 2 or more.

    More than MAX_STACK jobs of one setting split into stacks of near-equal size, so that none
    is left to train alone (a member trains bitwise the same in any stack of 2 or more).
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
    return [part for _, members in groups if len(members) > 1 for part in _split(members)]


Unit = tuple[list[int], Job[Any]]
"""A job a worker runs and the positions of the results it gives: one, or a Stacked share's."""


def units(jobs: Sequence[Job[Any]], parts: int, compiled: bool = False) -> list[Unit]:
    """Each job alone, but each stack cut into up to `parts` shares of 2 or more, each one
    Stacked job (so `parts` workers train a stack side by side; `compiled`: runtime.compile);
    in the order of first jobs.

    No share holds one member: it would train unstacked, on other kernels than in a stack."""
    together = [s for g in stacks(jobs) for s in shares(g, max(min(parts, len(g) // 2), 1))]
    first = {share[0]: share for share in together}
    inside = {i for share in together for i in share}
    out: list[Unit] = []
    for i, job in enumerate(jobs):
        if i in first:
            out.append((first[i], Stacked(tuple(jobs[j] for j in first[i]), compiled)))
        elif i not in inside:
            out.append(([i], job))
    return out


def _split(members: list[int]) -> list[list[int]]:
    """`members` in the fewest stacks of at most MAX_STACK, their sizes differing by 1 at most."""
    return shares(members, -(-len(members) // MAX_STACK))
