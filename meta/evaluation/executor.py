"""Where meta-eval's jobs run: in this process, or in spawned worker processes.

An executor maps a picklable top-level function over jobs and yields the results in the jobs'
order, so sequential and parallel evaluation write identical results (every job carries its own
seeds; none reads global state). A Ray executor can stand behind the same interface.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Protocol, TypeVar

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


def make_executor(workers: int) -> Executor:
    """Sequential for 1 worker, else a spawned process pool."""
    return SequentialExecutor() if workers <= 1 else ProcessExecutor(workers)
