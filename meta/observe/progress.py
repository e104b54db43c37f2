"""The meta-step progress bar (rich): task just trained, its reward and success, time left."""

from __future__ import annotations

from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress


class Progress:
    """A progress bar over meta-steps; silent when disabled or when output is not a terminal."""

    def __init__(self, total: int, done: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self._bar = RichProgress(
            TextColumn("meta-step"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[last]}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            disable=not enabled,
            transient=False,
        )
        self._task = self._bar.add_task("meta-train", total=total, completed=done, last="")

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

    def advance(self, task: str, reward: float, success: float) -> None:
        """One meta-step done."""
        self._bar.update(
            self._task, advance=1, last=f"{task}: reward {reward:.3f} success {success:.2f}"
        )
