"""Runs trained in lockstep: one per seed of a setting (`seeds=[...]`), or a search's batch of
trials, each of its own settings.

Each run is a MetaTrainer of its own: its directory, lock, status, checkpoints, writers and
theta. Every round, each unfinished run starts its next meta-step (`meta_step_jobs`), the jobs
they all yield run as one call of the first run's executor (the jobs that stack in stacks, in
this process or on Ray actors), and each run is sent its share of the results. A member of a
stack trains bitwise the same whichever other members share it, as long as it has one
(meta.algorithm.ppo.kernels), so a run of the group equals the run of its seed alone wherever
that run stacks too (meta.meta_batch_size of 2 or more); a lone training, which alone trains as
a stack of one, gets companions here and equals it to rounding. The runs commit a meta-step
together: a signal waits until every run has committed it. A group of seeds ends at the first
error; a group of trials (`apart`) lets a run that fails end alone while the others go on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.request import TrainResult
from meta.observe.progress import Progress
from meta.process.signals import deferred_interrupt
from meta.run.names import command
from meta.runtime.executor import Executor, LocalExecutor
from meta.runtime.jobs import OnCrash, Training
from meta.trainer.loop import MetaTrainer, Rows

T = TypeVar("T")
Steps = Generator[list[Training], list[TrainResult], Rows]


class RunGroup:
    """Trains several runs to their ends in lockstep; each meta-step's jobs run as one.

    `apart`: a run whose meta-step or final weights fail ends there, its error in `failed`
    (by its index), and the others go on; else the error ends the group.
    """

    def __init__(
        self, trainers: Sequence[MetaTrainer], console: Console | None = None, apart: bool = False
    ) -> None:
        self.trainers, self.console, self.apart = list(trainers), console, apart
        self.failed: dict[int, Exception] = {}
        for trainer in self.trainers:  # a stack's time shows in each of its runs' timers
            trainer.timers.shared_with([t.run_dir.name for t in self.trainers if t is not trainer])

    def run(self) -> list[Path]:
        """Train every run until its meta.steps, then write their final weights together."""
        first = self.trainers[0]
        total = max(t.cfg.meta.steps for t in self.trainers)
        done = min(t.meta_step for t in self.trainers)
        with Progress(total, done, self.console, first.cfg.logger.console) as progress:
            while going := [t for t in self._going() if t.meta_step < t.cfg.meta.steps]:
                if tables := self.meta_step_once(going):
                    progress.finished(tables[0])
        with deferred_interrupt():
            for trainer in self._going():
                self._apart(trainer, trainer.finish)
        return [t.run_dir for t in self.trainers]

    def _going(self) -> list[MetaTrainer]:
        return [t for i, t in enumerate(self.trainers) if i not in self.failed]

    def _apart(self, trainer: MetaTrainer, call: Callable[[], T]) -> T | None:
        """`call()`; apart, its error ends the trainer's run alone (None)."""
        try:
            return call()
        except Exception as error:
            self._fail(trainer, error)
            return None

    def _fail(self, trainer: MetaTrainer, error: Exception) -> None:
        """Apart, the trainer's run ends with `error`; else the error ends the group."""
        if not self.apart:
            raise error
        self.failed[self.trainers.index(trainer)] = error

    def meta_step_once(self, trainers: list[MetaTrainer]) -> list[Rows]:
        """The next meta-step of each of `trainers`, their jobs run together; the rows of each
        one that committed it."""
        first = trainers[0]
        timers = _EveryTimers(t.timers for t in trainers)
        runtime = first.cfg.runtime
        if runtime.backend == "ray" or runtime.workers > 1:  # the first run's actors or workers
            executor = first.inner.start_executor()
        else:
            executor = LocalExecutor(first.plan.pool, timers, runtime.compile)
        crashed = partial(first.inner.crashed, first.meta_step)
        with ExitStack() as scopes:
            for trainer in trainers:
                scopes.enter_context(trainer.timers.scope("meta_step"))
            steps: list[Steps] = [t.meta_step_jobs(t.meta_step) for t in trainers]
            pending: dict[int, list[Training]] = {}
            for i, s in enumerate(steps):
                if (jobs := self._apart(trainers[i], partial(next, s))) is not None:
                    pending[i] = jobs
            tables: dict[int, Rows] = {}
            while pending:
                results = self._results(executor, pending, crashed, trainers)
                pending = {i: pending[i] for i in results}  # apart, a run that failed ends
                with deferred_interrupt():  # every run commits the meta-step before a signal counts
                    for i, mine in results.items():
                        try:
                            pending[i] = steps[i].send(mine)
                        except StopIteration as committed:
                            tables[i] = committed.value
                            del pending[i]
                        except Exception as error:
                            self._fail(trainers[i], error)
                            del pending[i]
        return [tables[i] for i in sorted(tables)]

    def _results(
        self,
        executor: Executor,
        pending: dict[int, list[Training]],
        crashed: OnCrash,
        trainers: list[MetaTrainer],
    ) -> dict[int, list[TrainResult]]:
        """Each pending run's results, all its jobs run in one call; apart, where that call
        fails, each run's jobs in a call of its own, a run whose call fails ending alone."""
        order = list(pending)
        try:
            results = _run(executor, [job for i in order for job in pending[i]], crashed)
        except Exception as error:
            if len(order) == 1:
                self._fail(trainers[order[0]], error)
                return {}
            if not self.apart:
                raise
            alone = {i: partial(_run, executor, pending[i], crashed) for i in order}
            ran = {i: self._apart(trainers[i], call) for i, call in alone.items()}
            return {i: mine for i, mine in ran.items() if mine is not None}
        out = {}
        for i in order:
            out[i], results = results[: len(pending[i])], results[len(pending[i]) :]
        return out


def _run(executor: Executor, jobs: list[Training], crashed: OnCrash) -> list[TrainResult]:
    """The jobs' results, in order."""
    return list(executor.run(jobs, crashed))


class _EveryTimers:
    """Timers that time each block on every run's timers (the runs share the work)."""

    def __init__(self, timers: Iterator[Timers] | Sequence[Timers]) -> None:
        self.timers = list(timers)

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[Any]:
        """The block timed as `name` on each run's timers."""
        with ExitStack() as scopes:
            for timers in self.timers:
                scopes.enter_context(timers.scope(name))
            yield


State = tuple[str, str]
"""Where a run stands, said of one run and of several."""
COMPLETE: State = ("is complete", "are complete")
NO_META_STEP: State = ("holds no meta-step", "hold no meta-step")
NOT_BEGUN: State = ("was not begun", "were not begun")


def holding(committed: int) -> State:
    """A run that holds its first `committed` meta-steps (at least one)."""
    held = f"meta-steps 0..{committed - 1}"
    return f"holds {held}", f"hold {held}"


def stopped_line(
    reason: str,
    runs: Sequence[Path],
    trainers: Sequence[MetaTrainer],
    resumed: Sequence[bool],
    opened: int,
    words: Sequence[str],
) -> str:
    """`<reason>; <what the run directories hold>. <the group's command to go on>`.

    `trainers` are those made so far, `resumed` says which runs continue, `opened` how many
    runs were opened (written to), `words` the group's command.
    """
    if opened == 0:  # no run directory was touched
        where = "the runs are as they were" if any(r.exists() for r in runs) else ""
        again = f". Resume with: {command(*words, resume=True)}" if all(resumed) else ""
        return f"{reason} before the runs started; {where or 'nothing was written'}{again}"
    states, resumable = [], True
    for i, run_dir in enumerate(runs):
        trainer = trainers[i] if i < len(trainers) else None
        if trainer is not None and trainer.completed:
            states.append(COMPLETE)
        elif trainer is not None and trainer.committed > 0:
            states.append(holding(trainer.committed))
        elif resumed[i] and i < opened:
            states.append(("keeps its meta-steps", "keep their meta-steps"))
        elif resumed[i]:
            states.append(("is as it was", "are as they were"))
        else:
            resumable = False
            states.append(NO_META_STEP if run_dir.exists() else NOT_BEGUN)
    held = states_line(runs, states)
    if all(s == COMPLETE for s in states):
        return f"{reason} after the runs completed; {held}"
    if resumable:
        return f"{reason}; {held}. Resume with: {command(*words, resume=True)}"
    return f"{reason}; {held}: nothing to resume (start over with: {command(*words, force=True)})"


def states_line(runs: Sequence[Path], states: Sequence[State]) -> str:
    """`a and b hold meta-steps 0..4; c is complete`: each run's state (said of one run, of
    several), the runs in one state named together."""
    parts = []
    for state in dict.fromkeys(states):
        mine = [r for r, s in zip(runs, states, strict=True) if s == state]
        parts.append(f"{listed(mine)} {state[0] if len(mine) == 1 else state[1]}")
    return "; ".join(parts)


def listed(runs: Sequence[Path]) -> str:
    """`a, b and c`."""
    names = [str(r) for r in runs]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
