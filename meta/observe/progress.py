"""The meta-step progress bar (rich): the meta-step just finished, its task, reward and success.

The bar lives on the run's console (meta.observe.console), the same one log records print
through, so records appear above it. It numbers a meta-step as meta_steps.csv's `meta_step`
column does, since it reads the rows written for it, and says `no episode ended` where their
reward and success are NaN; only on a terminal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from meta.observe.reporter import NO_EPISODE

TASK_WIDTH = 11
"""Room for a task family's name (CarryObject); longer labels are cut with an ellipsis."""
SAMPLE_ROW = {"meta_step": 0, "task": "", "mean_reward": 0.0, "success_rate": 0.0}
"""A stand-in row: every label has the width of its (fixed-width) fields."""


def _mean(values: Iterable[Any]) -> float:
    finite = [float(v) for v in values if float(v) == float(v)]
    return sum(finite) / len(finite) if finite else math.nan


def task_label(rows: Sequence[Mapping[str, Any]]) -> str:
    """What was trained: one family's name, `2 families` (joint), or `4 tasks` (a meta-batch)."""
    if len(rows) > 1:
        return f"{len(rows)} tasks"
    task = str(rows[0]["task"])
    if "+" in task:
        return f"{task.count('+') + 1} families"
    return task if len(task) <= TASK_WIDTH else task[: TASK_WIDTH - 1] + "…"


def describe(rows: Sequence[Mapping[str, Any]], digits: int) -> str:
    """The bar's text for a finished meta-step, from its meta_steps.csv rows."""
    reward = _mean(r["mean_reward"] for r in rows)
    success = _mean(r["success_rate"] for r in rows)
    stats = f"reward {reward:6.3f} success {success:4.2f}"
    if math.isnan(reward) and math.isnan(success):
        stats = NO_EPISODE.ljust(len(stats))
    return (
        f"meta-step {int(rows[0]['meta_step']):>{digits}} {task_label(rows):<{TASK_WIDTH}} {stats}"
    )


class Progress:
    """A bar over meta-steps on `console`; absent when disabled or not on a terminal.

    The line stays two columns short of the console's width: a terminal echoes Ctrl-C as `^C`
    after it, and a full-width line would wrap there and leave a stale copy of the bar behind.
    """

    def __init__(
        self, total: int, done: int, console: Console | None = None, enabled: bool = True
    ) -> None:
        self.console = console or Console()
        self.enabled = enabled and self.console.is_terminal
        self._digits = len(str(max(total - 1, 0)))
        self._label_width = len(describe([SAMPLE_ROW], self._digits))
        self._bar_column = BarColumn(bar_width=self._bar_width())
        self._bar = RichProgress(
            TextColumn("{task.fields[last]}"),
            self._bar_column,
            TaskProgressColumn(),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.enabled,
            transient=False,
            expand=False,
        )
        running = f"meta-step {done:>{self._digits}} running".ljust(self._label_width)
        self._task = self._bar.add_task("meta-train", total=total, completed=done, last=running)

    def _bar_width(self) -> int:
        """What the console's width leaves for the bar: label, `100%`, `10:00:00`, 3 gaps, 2."""
        return max(5, self.console.width - self._label_width - 4 - 8 - 3 - 2)

    def __enter__(self) -> Progress:
        self._bar.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._bar.stop()

    def finished(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """A meta-step is done and recorded as `rows` (its meta_steps.csv rows)."""
        step = int(rows[0]["meta_step"])
        self._bar_column.bar_width = self._bar_width()  # the terminal may have been resized
        self._bar.update(
            self._task, completed=step + 1, last=describe(rows, self._digits), refresh=True
        )
