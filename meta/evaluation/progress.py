"""meta-eval's progress: one line per phase, each with its count, time spent and time left.

Every phase is listed from the start, so the bar says what is still to come: the joint
pretraining (meta-steps of the baselines meta-eval trains, read from their status files, so
any executor's trainings are counted), the adaptation jobs on the selection split, the choice
of each start's procedure on them (bootstrapped), the jobs on the reported splits, and the
statistics and plots. Each line's time counts from the start of its phase, and its time left
is rich's estimate from the phase's pace so far (`-:--:--` until it has one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from meta.evaluation.runs import JointBaseline

PRETRAINING, SELECTION, CHOICE, ADAPTATION, STATISTICS = (
    "pretraining",
    "selection",
    "choice",
    "adaptation",
    "statistics",
)
STATISTICS_STEPS = ("summary", "per seed", "steps to 80", "files", "figure")
"""What the statistics phase does, one step each."""
FIXED = 4 + 7 + 11 + 7 + 4 + 7
"""Columns besides the label and the bar: gaps, `120/120`, unit, elapsed, `left`, time left."""
log = logging.getLogger(__name__)
POLL_S = 0.25
SPEED_WINDOW_S = 24 * 3600.0
"""A phase's pace is its whole own (its jobs cost alike), not rich's last 30 s."""
"""How often the joint pretraining's meta-steps are read from its status files."""


class EvalProgress:
    """The bar; nothing is shown when disabled (the library's default)."""

    def __init__(self, enabled: bool, console: Console | None = None) -> None:
        self.console = console or Console()
        self._labels: dict[str, str] = {}
        self._bar = BarColumn()
        self._progress = Progress(
            TextColumn("{task.description}"),
            self._bar,
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]:<10}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not enabled,
            expand=False,
            speed_estimate_period=SPEED_WINDOW_S,
        )
        self._tasks: dict[str, TaskID] = {}
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def set_phases(self, phases: Sequence[tuple[str, str, int, str]]) -> None:
        """Every phase as (key, label, total, unit), shown in this order."""
        width = max(len(label) for _, label, _, _ in phases)
        self._bar.bar_width = max(5, min(40, self.console.width - width - FIXED - 2))
        for key, label, total, unit in phases:
            self._tasks[key] = self._progress.add_task(
                label.ljust(width), total=total, unit=unit, start=False
            )

    def _task(self, key: str) -> TaskID | None:
        """Phase `key`'s line, its clock started: it is running."""
        task = self._tasks.get(key)
        if task is not None and self._progress.tasks[task].start_time is None:
            self._progress.start_task(task)
        return task

    def __enter__(self) -> EvalProgress:
        self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop_watching()
        self._progress.stop()

    def advance(self, key: str, steps: int = 1) -> None:
        """`steps` more of phase `key` are done."""
        task = self._task(key)
        if task is not None:
            self._progress.advance(task, steps)
            self._progress.refresh()

    def done(self, key: str) -> None:
        """Phase `key` is over."""
        task = self._task(key)
        if task is not None:
            self._progress.update(task, completed=self._progress.tasks[task].total, refresh=True)

    def say(self, text: str) -> None:
        """A line above the bar (the log's, when the bar is off)."""
        if self._progress.disable:
            log.info(text)
        else:
            self._progress.console.print(text, markup=False, highlight=False)

    def begin(self, key: str, total: int) -> None:
        """Phase `key` starts, with `total` steps."""
        task = self._task(key)
        if task is not None:
            self._progress.update(task, total=total, refresh=True)

    def watch(self, joints: Sequence[JointBaseline]) -> None:
        """Count the joint pretraining's meta-steps as their runs commit them, until stopped."""
        task = self._task(PRETRAINING)
        if task is None or not joints or self._progress.disable:
            return
        start = [j.committed for j in joints]

        def poll() -> None:
            while not self._stop.wait(POLL_S):
                done = sum(j.committed - s for j, s in zip(joints, start, strict=True))
                self._progress.update(task, completed=done, refresh=True)

        self._watcher = threading.Thread(target=poll, name="meta-eval progress", daemon=True)
        self._watcher.start()

    def stop_watching(self) -> None:
        """Stop reading the joint runs' status files."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
