"""Where jobs run: this process, spawned worker processes, or Ray actors; each trains stacks.

One stack for meta-train and meta-eval. An executor runs a list of jobs (meta.runtime.jobs:
meta-train's training requests, meta-eval's adaptations) and yields their results in the jobs'
order, each as soon as it and those before it are done, so sequential and parallel runs give
identical results (every job carries its own seeds; none reads global state; the jobs that
stack train in stacks of two or more wherever they run, meta.runtime.jobs). A job whose
environment crashed (a build died, an actor was lost) is retried from its start after
`on_crash(error)`, which counts the crash and raises to give up, so a caller gets every
result or none.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.synchronize import Event
from typing import Protocol, TypeVar

from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.config import EnvConfig, RuntimeConfig
from meta.process.signals import deferred_interrupt
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import Job, OnCrash, Stacked, give_up, run_jobs, units

R = TypeVar("R")
WORKER_LOST = "a worker process ended abruptly (killed, or out of memory?)"
"""Why a process pool's run stopped when one of its workers died."""


def retrying(times: int) -> OnCrash:
    """Retry up to `times` crashes in all, then give up with the last one."""
    crashes = 0

    def on_crash(crash: BaseException) -> None:
        nonlocal crashes
        crashes += 1
        if crashes > times:
            raise crash

    return on_crash


class Executor(Protocol):
    """Runs jobs; results in the order of `jobs`."""

    def run(self, jobs: Sequence[Job[R]], on_crash: OnCrash = give_up) -> Iterator[R]:
        """Every job's result, in order; crashed ones retried from their start."""
        ...

    def close(self) -> None:
        """Release workers and their environments."""
        ...


class LocalExecutor:
    """Every job in this process, on one environment pool (the run's, for meta-train); the jobs
    that stack as stacks (`compiled`: runtime.compile)."""

    def __init__(
        self, pool: EnvPool, timers: Timers | None = None, compiled: bool = False, own: bool = False
    ) -> None:
        """`own`: the pool is this executor's, closed with it."""
        self.pool, self.timers = pool, timers or NullTimers()
        self.compiled, self.own = compiled, own

    def run(self, jobs: Sequence[Job[R]], on_crash: OnCrash = give_up) -> Iterator[R]:
        """Every result, in order; a crashed build is relaunched and its job (or stack) retried."""
        return run_jobs(jobs, self.pool, self.timers, self.compiled, on_crash)

    def close(self) -> None:
        """Close the pool if it is this executor's (the run closes its own)."""
        if self.own:
            self.pool.close()


_worker_pool: EnvPool | None = None
_worker_stop: Event | None = None


def _init_worker(env: EnvConfig, stop: Event, precision: str) -> None:
    """One torch thread per worker (the workers share the machine's cores), the float32 matmul
    `precision` its executor was made with (the making process's), and a pool; Ctrl-C ignored
    but while a job runs (`_in_worker`); once `stop` is set, no job starts."""
    import torch

    from meta.process.compute import set_matmul_precision

    global _worker_pool, _worker_stop
    _worker_stop = stop
    sys.unraisablehook = _quiet_interrupt
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by `_spawning`
    torch.set_num_threads(1)
    set_matmul_precision(precision)
    _worker_pool = EnvPool.claiming(env)


def _quiet_interrupt(unraisable: sys.UnraisableHookArgs) -> None:
    """A worker's Ctrl-C that lands where Python cannot raise it (an import's lock callback,
    a finaliser) is the stop its job already reports: say nothing of it on the shared stderr."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _in_worker(job: Job[R]) -> R:
    """The job on its worker's pool (the body of every worker task); Ctrl-C stops the job, which
    gives its KeyboardInterrupt (or a run's Stopped) back as its result."""
    assert _worker_pool is not None and _worker_stop is not None
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if _worker_stop.is_set():  # queued before the executor was interrupted
            raise KeyboardInterrupt
        return job(_worker_pool, NullTimers())
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _spawning() -> Iterator[None]:
    """Ctrl-C blocked in this thread while it may spawn workers, who inherit the mask: a worker
    starts deaf to it (the terminal sends it to every process of the group, and one still
    importing or waiting for work would die with a traceback). A Ctrl-C or SIGTERM that
    reaches this process meanwhile (through another of its threads) is raised once the pool
    has its workers, not in the middle of spawning one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with deferred_interrupt():
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


class ProcessExecutor:
    """Jobs in `workers` spawned processes (a fresh interpreter each: no forked torch state).

    A crash in a worker ends the run of jobs with its error: meta-eval's jobs, the ones run
    here, claim their own ports and builds (meta.runtime.slots) and have none to retry.
    """

    def __init__(self, workers: int, env: EnvConfig, compiled: bool = False) -> None:
        """The jobs that stack train as one stack cut into a share per worker (`compiled`:
        runtime.compile for those shares). The workers run at this process's float32 matmul
        precision of now (`torch_matmul_precision`)."""
        self.workers, self.compiled = workers, compiled
        self.builds = env.backend != "native"
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        import torch

        precision = torch.get_float32_matmul_precision()
        self._pool = ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(env, self._stop, precision),
        )

    def run(self, jobs: Sequence[Job[R]], on_crash: OnCrash = give_up) -> Iterator[R]:
        """Every job (or a stack's share) in the workers, results in order."""
        work = units(jobs, self.workers, self.compiled, self.builds)
        results: dict[int, R] = {}
        given = 0
        with _spawning():
            done = self._pool.map(_in_worker, [job for _, job in work], chunksize=1)
        for (where, job), got in zip(work, done, strict=True):
            results.update(zip(where, got if isinstance(job, Stacked) else [got], strict=True))
            while given in results:
                yield results.pop(given)
                given += 1

    def close(self) -> None:
        """Stop the workers (pending jobs are cancelled).

        A broken pool (a worker died) terminates its other workers and waits for them, but a
        worker that a submit spawned while it was doing so is missed and never ends: its
        wait would hang shutdown, so every worker still alive is terminated here first."""
        if self._pool._broken:
            for process in list((self._pool._processes or {}).values()):
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def interrupt(self) -> None:
        """Ctrl-C to every worker (one stops its job, an idle one ignores it and starts no other
        job), then close."""
        self._stop.set()
        for process in list((self._pool._processes or {}).values()):
            with contextlib.suppress(ProcessLookupError, TypeError):  # gone, or never started
                os.kill(process.pid, signal.SIGINT)  # type: ignore[arg-type]
        self.close()


def stop_workers(executor: Executor) -> None:
    """The jobs in an executor's worker processes stopped as this process was, and waited for.

    A terminal's Ctrl-C reaches every process of its group, but `kill -INT` of this one alone
    reaches no worker: each would finish its job first. Jobs in this process need nothing.
    """
    if isinstance(executor, ProcessExecutor):
        executor.interrupt()


def make_executor(
    runtime: RuntimeConfig,
    env: EnvConfig,
    workers: int = 1,
    pool: EnvPool | None = None,
    timers: Timers | None = None,
) -> Executor:
    """Ray actors for runtime=ray (connected already), else this process for 1 worker, else a
    process pool whose workers each take their share of every stack; `pool` is this process's
    (meta-train's run pool; one of its own, on a claimed slot of builds, if None)."""
    if runtime.backend == "ray":
        from meta.runtime.actors import RayExecutor

        return RayExecutor(runtime, env, None if pool is None else pool.log_folder)
    if workers > 1:
        return ProcessExecutor(workers, env, runtime.compile)
    if pool is None:
        return LocalExecutor(EnvPool.claiming(env), timers, runtime.compile, own=True)
    return LocalExecutor(pool, timers, runtime.compile)
