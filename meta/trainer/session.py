"""One meta-train process on one run: the lock, the trainer, and how it stops, in one line.

Every way a run can stop early (Ctrl-C, SIGTERM, a full disk, a corrupt checkpoint, builds that
keep crashing, a second process) becomes a `Stopped` with a one-line message and an exit code;
the message says what the run directory holds and, when something is resumable, the command
that resumes it, exactly as it must be typed.
"""

from __future__ import annotations

import contextlib
import errno
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from envs.backend.worker import BuildError
from meta.errors import first_line
from meta.run import faults
from meta.run.checkpoints import CheckpointError
from meta.run.configuration import record_changes
from meta.run.interrupt import Terminated, held_signals, raise_on_signals
from meta.run.lock import RunLock, RunLocked
from meta.run.names import run_command
from meta.run.signals import HELD, exit_at_once, exit_code
from meta.run.status import StatusError
from meta.runtime.cluster import Cluster, join_or_start_ray
from meta.trainer.dispatch import BuildsExhausted
from meta.trainer.loop import MetaTrainer
from meta.trainer.preflight import TrainingPlan

INTERRUPTED, TERMINATED, FAILED, INPUT = 130, 143, 1, 2


class Stopped(Exception):
    """The run stopped before its end; `str()` is the one line to print, `code` the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def resume_command(run_id: str, results_dir: str) -> str:
    """The command that continues `run_id` with its own configuration."""
    return run_command("meta-train", run_id, results_dir, resume=True)


def run(
    plan: TrainingPlan,
    config_yaml: str,
    resolved: dict[str, Any],
    console: Console | None = None,
    changes: Mapping[str, tuple[Any, Any]] | None = None,
    program: str | None = "meta-train",
) -> Path:
    """Join Ray, lock the run, train it to its end, release it; Stopped for every early stop.

    Signals raise from the lock on, and are held while the run is released. For a `program`
    (the console script), once the run is complete or stopped they end the process at once,
    saying so (`meta.run.interrupt`); called as a library (`program=None`) the caller's
    handlers are back when it returns.
    """
    with _signals_restored(program is None):
        return _run(plan, config_yaml, resolved, console, changes, program)


def _run(
    plan: TrainingPlan,
    config_yaml: str,
    resolved: dict[str, Any],
    console: Console | None,
    changes: Mapping[str, tuple[Any, Any]] | None,
    program: str | None,
) -> Path:
    cluster = _join_or_start_ray(plan)
    lock = RunLock(plan.cfg.results_dir, plan.run_id)
    trainers: list[MetaTrainer] = []
    raise_on_signals()
    try:
        run_dir = _locked_run(plan, lock, trainers, config_yaml, resolved, console, changes)
    except BaseException as error:
        _release(plan, lock, trainers, cluster)  # a signal while releasing changes nothing
        if isinstance(error, Stopped) and program is not None:
            exit_at_once(program, str(error))
        raise
    received = _release(plan, lock, trainers, cluster)
    done = f"interrupted after the run completed; {run_dir} is complete"
    if program is not None:
        exit_at_once(program, done)
    faults.at("after_release", trainers[0].meta_step)
    if received:
        raise Stopped(done, exit_code(received[0]))
    return run_dir


@contextlib.contextmanager
def _signals_restored(restore: bool) -> Iterator[None]:
    """The handlers of Ctrl-C and SIGTERM as they were before the block (if `restore`)."""
    before = {sig: signal.getsignal(sig) for sig in HELD} if restore else {}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _locked_run(
    plan: TrainingPlan,
    lock: RunLock,
    trainers: list[MetaTrainer],
    config_yaml: str,
    resolved: dict[str, Any],
    console: Console | None,
    changes: Mapping[str, tuple[Any, Any]] | None,
) -> Path:
    """Take the lock and train; every early stop becomes a Stopped."""
    opened: list[bool] = []
    try:
        lock.acquire()
        trainers.append(
            MetaTrainer(plan, config_yaml, resolved, console, on_open=lambda: opened.append(True))
        )
        record_changes(trainers[0].run_dir, trainers[0].meta_step, changes or {})
        return trainers[0].run()
    except RunLocked as error:
        raise Stopped(str(error), FAILED) from error
    except (KeyboardInterrupt, Terminated) as error:
        code = TERMINATED if isinstance(error, Terminated) else INTERRUPTED
        message = _stopped("interrupted", plan, _first(trainers), lock.held, bool(opened))
        raise Stopped(message, code) from error
    except OSError as error:
        if error.errno == errno.ENOSPC:
            reason = f"no space left on device writing {error.filename}"
        else:
            reason = f"{error.strerror or error} ({error.filename})"
        raise Stopped(_stopped(reason, plan, _first(trainers)), FAILED) from error
    except (BuildsExhausted, BuildError, CheckpointError, StatusError, ValueError) as error:
        raise Stopped(_stopped(first_line(error), plan, _first(trainers)), FAILED) from error


def _first(trainers: list[MetaTrainer]) -> MetaTrainer | None:
    return trainers[0] if trainers else None


def _release(
    plan: TrainingPlan, lock: RunLock, trainers: list[MetaTrainer], cluster: Cluster | None
) -> list[int]:
    """Close the trainer, the plan's builds, Ray and the lock; the signals held meanwhile."""
    with held_signals() as received:
        if trainers:
            _close_quietly(trainers[0])
        plan.close()
        if cluster is not None:
            cluster.close()
        lock.release()
    return received


def _join_or_start_ray(plan: TrainingPlan) -> Cluster | None:
    """runtime=ray: the cluster, joined or started before anything is written; else None."""
    if plan.cfg.runtime.backend != "ray":
        return None
    try:
        return join_or_start_ray(plan.cfg.runtime)
    except RuntimeError as error:
        plan.close()
        raise Stopped(first_line(error), INPUT) from error


def _stopped(
    reason: str,
    plan: TrainingPlan,
    trainer: MetaTrainer | None,
    locked: bool = True,
    opened: bool = False,
) -> str:
    """`<reason>; <what the run directory holds>[. Resume with: <command>]`."""
    cfg, run_dir = plan.cfg, Path(plan.cfg.results_dir) / plan.run_id
    command = resume_command(plan.run_id, cfg.results_dir)
    if not locked:  # stopped before or while taking the lock: the run was not touched
        where = f"{run_dir} is as it was" if run_dir.exists() else "nothing was written"
        return f"{reason} before the run started; {where}"
    if trainer is not None and trainer.completed:
        return f"{reason} after the run completed; {run_dir} is complete"
    if trainer is None and cfg.resume and opened:  # its status and configuration rewritten
        kept = f"{run_dir} keeps its meta-steps"
        return f"{reason} while the run resumed; {kept}. Resume with: {command}"
    if trainer is None and cfg.resume:
        return f"{reason} before the run resumed; {run_dir} is as it was. Resume with: {command}"
    done = 0 if trainer is None else trainer.committed
    if done > 0:
        return f"{reason}; {run_dir} holds meta-steps 0..{done - 1}. Resume with: {command}"
    if not run_dir.exists():
        return f"{reason} before the run started; nothing was written"
    return (
        f"{reason} before the first meta-step completed; nothing to resume "
        f"(start {plan.run_id!r} over with force=true)"
    )


def _close_quietly(trainer: MetaTrainer) -> None:
    """Close writers and builds; a second failure while closing must not hide the first."""
    with contextlib.suppress(OSError, KeyboardInterrupt, Terminated):
        trainer.close()
