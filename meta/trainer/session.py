"""One meta-train process on one run (or a group of seeds): locks, trainers, and how it stops.

Every way a run can stop early (Ctrl-C, SIGTERM, a full disk, a corrupt checkpoint, builds that
keep crashing, a second process) becomes a `Stopped` with a one-line message and an exit code;
the message says what the run directory holds and, when something is resumable, the command
that resumes it, exactly as it must be typed. A group of seeds (`run_group`) goes through the
same regime, every run locked, its line naming every run directory and the group's command.
"""

from __future__ import annotations

import contextlib
import errno
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from envs.backend.worker import BuildError
from meta.errors import first_line
from meta.process import faults
from meta.process.lock import RunLock, RunLocked
from meta.process.signals import (
    HELD,
    Terminated,
    exit_at_once,
    exit_code,
    held_signals,
    raise_on_signals,
)
from meta.run.checkpoints import CheckpointError
from meta.run.configuration import record_changes
from meta.run.names import run_command
from meta.run.status import StatusError
from meta.runtime.cluster import Cluster, join_or_start_ray
from meta.trainer.loop import BuildsExhausted, MetaTrainer
from meta.trainer.preflight import TrainingPlan
from meta.trainer.seeds import (
    COMPLETE,
    NO_META_STEP,
    NOT_BEGUN,
    RunGroup,
    State,
    holding,
    listed,
    states_line,
    stopped_line,
)

INTERRUPTED, TERMINATED, FAILED, INPUT = 130, 143, 1, 2


class Stopped(Exception):
    """The run stopped before its end; `str()` is the one line to print, `code` the exit code.

    The line begins with the `reason`, from which a caller that trained the runs for its own
    command says the stop its own way (meta.evaluation.pretraining.joint_weights).
    """

    def __init__(self, message: str, code: int, reason: str = "") -> None:
        super().__init__(message)
        self.code, self.reason = code, reason or message

    def __reduce__(self) -> tuple[type[Stopped], tuple[str, int, str]]:
        """Whole across processes (a stop in a worker reaches the parent as it was raised)."""
        return type(self), (str(self), self.code, self.reason)


@dataclass(frozen=True)
class Start:
    """A planned run and what it opens with: its configuration in force and accepted changes."""

    plan: TrainingPlan
    config_yaml: str
    resolved: dict[str, Any]
    changes: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)


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
    saying so (`meta.process.signals`); called as a library (`program=None`) the caller's
    handlers are back when it returns.
    """
    start = Start(plan, config_yaml, resolved, changes or {})
    with _signals_restored(program is None):
        return _run([start], console, program, None)[0]


def run_group(
    starts: Sequence[Start],
    words: Sequence[str],
    console: Console | None = None,
    program: str | None = "meta-train",
) -> list[Path]:
    """Runs of one setting, one per seed, trained in lockstep (meta.trainer.seeds) as `run`
    trains one: every run locked, and every early stop one line naming the group's command,
    `words` (its program and overrides, without resume and force)."""
    with _signals_restored(program is None):
        return _run(starts, console, program, words)


def _run(
    starts: Sequence[Start],
    console: Console | None,
    program: str | None,
    group: Sequence[str] | None,
) -> list[Path]:
    plans = [start.plan for start in starts]
    cluster = _join_or_start_ray(plans[0])
    locks = [RunLock(plan.cfg.results_dir, plan.run_id) for plan in plans]
    trainers: list[MetaTrainer] = []
    raise_on_signals()
    try:
        run_dirs = _locked_run(starts, locks, trainers, console, group)
    except BaseException as error:
        _release(plans, locks, trainers, cluster)  # a signal while releasing changes nothing
        if isinstance(error, Stopped) and program is not None:
            exit_at_once(program, str(error))
        raise
    received = _release(plans, locks, trainers, cluster)
    if group is None:
        done = f"interrupted after the run completed; {run_dirs[0]} is complete"
    else:
        done = f"interrupted after the runs completed; {listed(run_dirs)} are complete"
    if program is not None:
        exit_at_once(program, done)
    faults.at("after_release", trainers[0].meta_step)
    if received:
        raise Stopped(done, exit_code(received[0]), "interrupted")
    return run_dirs


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
    starts: Sequence[Start],
    locks: list[RunLock],
    trainers: list[MetaTrainer],
    console: Console | None,
    group: Sequence[str] | None,
) -> list[Path]:
    """Take the locks and train; every early stop becomes a Stopped."""
    opened: list[bool] = []
    try:
        for lock in locks:
            lock.acquire()
        for start in starts:
            label = None if group is None else f"seed {start.plan.cfg.seed}"
            trainer = MetaTrainer(
                start.plan,
                start.config_yaml,
                start.resolved,
                console,
                on_open=lambda: opened.append(True),
                label=label,
            )
            trainers.append(trainer)
            record_changes(trainer.run_dir, trainer.meta_step, start.changes)
        if group is None:
            return [trainers[0].run()]
        return RunGroup(trainers, console).run()
    except (KeyboardInterrupt, Terminated) as error:
        code = TERMINATED if isinstance(error, Terminated) else INTERRUPTED
        if group is None:
            message = _stopped(
                "interrupted", starts[0].plan, _first(trainers), locks[0].held, bool(opened)
            )
        else:
            message = _group_stopped("interrupted", starts, trainers, len(opened), group)
        raise Stopped(message, code, "interrupted") from error
    except Exception as error:
        stop = _stop(error, lambda reason: _failed(reason, starts, trainers, len(opened), group))
        if stop is None:
            raise
        raise stop from error


RUN_ERRORS = (BuildsExhausted, BuildError, CheckpointError, StatusError, ValueError)
"""Errors of a run rather than of the code, besides the lock's and the file system's."""


def _stop(error: Exception, line: Callable[[str], str]) -> Stopped | None:
    """The Stopped a run's error becomes, `line(reason)` its line; None for an error of the
    code rather than of the run (its traceback is the report)."""
    if isinstance(error, RunLocked):
        return Stopped(str(error), FAILED)
    if isinstance(error, OSError):
        if error.errno == errno.ENOSPC:
            reason = f"no space left on device writing {error.filename}"
        else:
            reason = f"{error.strerror or error} ({error.filename})"
    elif isinstance(error, RUN_ERRORS):
        reason = first_line(error)
    else:
        return None
    return Stopped(line(reason), FAILED, reason)


def run_apart(
    starts: Sequence[Start],
    labels: Sequence[str],
    console: Console | None = None,
    program: str = "meta-train",
) -> list[Path | Exception]:
    """Runs of their own settings (a search's batch of trials) trained in lockstep
    (meta.trainer.seeds), each ending as `run` ends it alone: its run directory, or the error
    `run` raises (a Stopped saying what its directory holds), the others going on. Ctrl-C or
    SIGTERM stops them all: one Stopped saying where each run stands. `labels` name the runs
    on the console; once they are released a signal ends `program` at once, as `run`'s does."""
    plans = [start.plan for start in starts]
    cluster = _join_or_start_ray(plans[0])
    locks = [RunLock(plan.cfg.results_dir, plan.run_id) for plan in plans]
    trainers: dict[int, MetaTrainer] = {}
    ended: dict[int, Exception | Stopped] = {}
    raise_on_signals()
    try:
        for i, start in enumerate(starts):
            opened: list[bool] = []
            try:
                locks[i].acquire()
                trainers[i] = MetaTrainer(
                    start.plan,
                    start.config_yaml,
                    start.resolved,
                    console,
                    on_open=partial(opened.append, True),
                    label=labels[i],
                )
                record_changes(trainers[i].run_dir, trainers[i].meta_step, start.changes)
            except Exception as error:
                trainer, held = trainers.pop(i, None), locks[i].held
                if trainer is not None:
                    _close_quietly(trainer)
                line = partial(_stopped, plan=start.plan, trainer=trainer, locked=held)
                ended[i] = _stop(error, partial(line, opened=bool(opened))) or error
        order = sorted(trainers)
        group = RunGroup([trainers[i] for i in order], console, apart=True)
        if order:
            group.run()
        for j, failure in group.failed.items():
            i = order[j]
            line = partial(_stopped, plan=plans[i], trainer=trainers[i])
            ended[i] = _stop(failure, line) or failure
    except (KeyboardInterrupt, Terminated) as error:
        code = TERMINATED if isinstance(error, Terminated) else INTERRUPTED
        runs = [Path(plan.cfg.results_dir) / plan.run_id for plan in plans]
        states = [_state(run, trainers.get(i)) for i, run in enumerate(runs)]
        _release(plans, locks, list(trainers.values()), cluster)
        message = f"interrupted; {states_line(runs, states)}"
        exit_at_once(program, message)
        raise Stopped(message, code, "interrupted") from error
    except BaseException:
        _release(plans, locks, list(trainers.values()), cluster)
        raise
    received = _release(plans, locks, list(trainers.values()), cluster)
    exit_at_once(program, "interrupted after the runs ended")
    if received:
        raise Stopped("interrupted after the runs ended", exit_code(received[0]), "interrupted")
    return [ended[i] if i in ended else trainers[i].run_dir for i in range(len(starts))]


def _state(run_dir: Path, trainer: MetaTrainer | None) -> State:
    """Where a run of a group stands."""
    if trainer is not None and trainer.completed:
        return COMPLETE
    if trainer is not None and trainer.committed > 0:
        return holding(trainer.committed)
    return NO_META_STEP if run_dir.exists() else NOT_BEGUN


def _failed(
    reason: str,
    starts: Sequence[Start],
    trainers: list[MetaTrainer],
    opened: int,
    group: Sequence[str] | None,
) -> str:
    """The line of a stop by an error."""
    if group is None:
        return _stopped(reason, starts[0].plan, _first(trainers))
    return _group_stopped(reason, starts, trainers, opened, group)


def _first(trainers: list[MetaTrainer]) -> MetaTrainer | None:
    return trainers[0] if trainers else None


def _release(
    plans: list[TrainingPlan],
    locks: list[RunLock],
    trainers: list[MetaTrainer],
    cluster: Cluster | None,
) -> list[int]:
    """Close the trainers, the plans' builds, Ray and the locks; the signals held meanwhile."""
    with held_signals() as received:
        for trainer in trainers:
            _close_quietly(trainer)
        for plan in plans:
            plan.close()
        if cluster is not None:
            cluster.close()
        for lock in reversed(locks):
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


def _group_stopped(
    reason: str,
    starts: Sequence[Start],
    trainers: list[MetaTrainer],
    opened: int,
    group: Sequence[str],
) -> str:
    """The line of a group's early stop (meta.trainer.seeds.stopped_line)."""
    runs = [Path(s.plan.cfg.results_dir) / s.plan.run_id for s in starts]
    resumed = [s.plan.cfg.resume for s in starts]
    return stopped_line(reason, runs, trainers, resumed, opened, group)
