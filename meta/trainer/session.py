"""One meta-train process on one run: the lock, the trainer, and how it stops, in one line.

Every way a run can stop early (Ctrl-C, SIGTERM, a full disk, a corrupt checkpoint, builds that
keep crashing, a second process) becomes a `Stopped` with a one-line message and an exit code;
the message says what the run directory holds and, when something is resumable, the command
that resumes it, exactly as it must be typed.
"""

from __future__ import annotations

import contextlib
import errno
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from envs.backend.worker import BuildError
from meta.run.checkpoints import CheckpointError
from meta.run.configuration import record_changes
from meta.run.interrupt import Terminated
from meta.run.lock import RunLock, RunLocked
from meta.run.status import StatusError
from meta.runtime.cluster import Cluster, join_or_start_ray
from meta.trainer.inner import BuildsExhausted
from meta.trainer.loop import MetaTrainer
from meta.trainer.preflight import Plan

DEFAULT_RESULTS_DIR = "results"
INTERRUPTED, TERMINATED, FAILED, INPUT = 130, 143, 1, 2


class Stopped(Exception):
    """The run stopped before its end; `str()` is the one line to print, `code` the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def resume_command(run_id: str, results_dir: str) -> str:
    """The command that continues `run_id` with its own configuration."""
    words = ["meta-train", f"run_id={run_id}", "resume=true"]
    if results_dir != DEFAULT_RESULTS_DIR:
        words.append(f"results_dir={results_dir}")
    return " ".join(shlex.quote(word) for word in words)


def run(
    plan: Plan,
    config_yaml: str,
    resolved: dict[str, Any],
    console: Console | None = None,
    changes: Mapping[str, tuple[Any, Any]] | None = None,
) -> Path:
    """Join Ray, lock the run, train it to its end, release it; Stopped for every early stop."""
    cfg = plan.cfg
    cluster = _join_or_start_ray(plan)
    lock = RunLock(cfg.results_dir, plan.run_id)
    try:
        lock.acquire()
    except RunLocked as error:
        if cluster is not None:
            cluster.close()
        raise Stopped(str(error), FAILED) from error
    trainer: MetaTrainer | None = None
    try:
        trainer = MetaTrainer(plan, config_yaml, resolved, console)
        record_changes(trainer.run_dir, trainer.meta_step, changes or {})
        return trainer.run()
    except (KeyboardInterrupt, Terminated) as error:
        code = TERMINATED if isinstance(error, Terminated) else INTERRUPTED
        raise Stopped(_stopped("interrupted", plan, trainer), code) from error
    except OSError as error:
        if error.errno == errno.ENOSPC:
            reason = f"no space left on device writing {error.filename}"
        else:
            reason = f"{error.strerror or error} ({error.filename})"
        raise Stopped(_stopped(reason, plan, trainer), FAILED) from error
    except (BuildsExhausted, BuildError, CheckpointError, StatusError, ValueError) as error:
        raise Stopped(_stopped(_first_line(error), plan, trainer), FAILED) from error
    finally:
        if trainer is not None:
            _close_quietly(trainer)
        plan.close()
        if cluster is not None:
            cluster.close()
        lock.release()


def _join_or_start_ray(plan: Plan) -> Cluster | None:
    """runtime=ray: the cluster, joined or started before anything is written; else None."""
    if plan.cfg.runtime.backend != "ray":
        return None
    try:
        return join_or_start_ray(plan.cfg.runtime)
    except RuntimeError as error:
        plan.close()
        raise Stopped(_first_line(error), INPUT) from error


def _stopped(reason: str, plan: Plan, trainer: MetaTrainer | None) -> str:
    """`<reason>; <what the run directory holds>[. Resume with: <command>]`."""
    cfg, run_dir = plan.cfg, Path(plan.cfg.results_dir) / plan.run_id
    command = resume_command(plan.run_id, cfg.results_dir)
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


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _close_quietly(trainer: MetaTrainer) -> None:
    """Close writers and builds; a second failure while closing must not hide the first."""
    with contextlib.suppress(OSError, KeyboardInterrupt, Terminated):
        trainer.close()
