"""Where meta-eval's jobs run: in this process, in spawned worker processes, or on Ray.

An executor maps a picklable top-level function over jobs and yields the results in the jobs'
order, so sequential and parallel evaluation write identical results (every job carries its own
seeds; none reads global state).
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from meta.config import RuntimeConfig

J = TypeVar("J")
R = TypeVar("R")


class Executor(Protocol):
    """Runs jobs; `map` yields results in the order of `jobs`, as each becomes available."""

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """fn(job) for every job, in order."""
        ...

    def close(self) -> None:
        """Release the workers."""
        ...


class SequentialExecutor:
    """Every job in this process, one after the other."""

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """fn(job) for every job, in order."""
        return (fn(job) for job in jobs)

    def close(self) -> None:
        """Nothing to release."""


def _init_worker() -> None:
    """One torch thread per worker: the workers share the machine's cores."""
    import torch

    torch.set_num_threads(1)


class ProcessExecutor:
    """Jobs in `workers` spawned processes (a fresh interpreter each: no forked torch state)."""

    def __init__(self, workers: int) -> None:
        self._pool = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
        )

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """fn(job) for every job in the workers, results in order."""
        return self._pool.map(fn, jobs, chunksize=1)

    def close(self) -> None:
        """Stop the workers (pending jobs are cancelled)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _call_with_threads(fn: Callable[[J], R], job: J, threads: int) -> R:
    """fn(job) on `threads` torch threads (the body of every Ray task)."""
    import torch

    torch.set_num_threads(threads)
    return fn(job)


class RayExecutor:
    """Jobs as Ray tasks, at most `num_actors` at once, each on `cpus_per_actor` CPUs.

    Ray reruns a task whose worker process died (up to `retries` times); results in order.
    """

    def __init__(self, runtime: RuntimeConfig, retries: int = 3) -> None:
        import ray

        self.runtime = runtime
        self._task: Any = ray.remote(_call_with_threads).options(
            num_cpus=runtime.cpus_per_actor, max_retries=retries
        )

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """fn(job) for every job on the cluster, results in order."""
        import ray

        fn_ref, pending = ray.put(fn), deque[Any]()
        for job in jobs:
            if len(pending) >= self.runtime.num_actors:
                yield ray.get(pending.popleft())
            pending.append(self._task.remote(fn_ref, job, self.runtime.torch_threads))
        while pending:
            yield ray.get(pending.popleft())

    def close(self) -> None:
        """Ray's workers belong to the cluster; nothing to release here."""


def make_executor(workers: int, runtime: RuntimeConfig | None = None) -> Executor:
    """Ray for runtime=ray (connected already); sequential for 1 worker; else a process pool."""
    if runtime is not None and runtime.backend == "ray":
        return RayExecutor(runtime)
    return SequentialExecutor() if workers <= 1 else ProcessExecutor(workers)
