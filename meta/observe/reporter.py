"""Stats reporter fanning out to console, CSV, TensorBoard and wandb writers.

`reporter.write(meta_step, total_env_steps, {tag: value})` sends scalars (ML-Agents tag names
where they exist, `Meta/...` for ours); `reporter.write_rows(table, rows)` sends table rows
(`meta_steps.csv`, optionally `inner_updates.csv`). Every writer receives everything and keeps
what it handles. TensorBoard gets each scalar twice: `tag` against the meta-step in
`<run_dir>/tensorboard/`, and `EnvSteps/<tag>` against total inner env steps in
`<run_dir>/tensorboard/env_steps/` (a separate event file, so each axis has its own purge step).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from meta.observe.tables import CSVWriter
from meta.observe.tags import (
    CUMULATIVE_REWARD,
    ELO,
    EPISODE_LENGTH,
    OUTER_LR,
    SUCCESS_RATE,
    WEIGHT_DELTA_NORM,
)

logger = logging.getLogger(__name__)


META_STEPS_TABLE = "meta_steps"
INNER_UPDATES_TABLE = "inner_updates"
META_STEP_COLUMNS = (
    "meta_step",
    "task",
    "task_params",
    "inner_steps",
    "mean_reward",
    "success_rate",
    "learning_rate",
    "beta",
    "epsilon",
    "outer_lr",
    "weight_delta_norm",
    "wall_time_s",
)
ENV_STEPS_PREFIX = "EnvSteps/"
Point = tuple[int, Mapping[str, float]]
"""Scalars summarised inside a meta-step, at the run's env step where their period ended."""
CONSOLE_LABELS = {
    CUMULATIVE_REWARD: "mean_reward",
    SUCCESS_RATE: "success_rate",
    EPISODE_LENGTH: "episode_length",
    OUTER_LR: "outer_lr",
    WEIGHT_DELTA_NORM: "theta_delta_norm",
    ELO: "elo",
}
"""The summary line's names: meta_steps.csv's columns for the same values (episode_length has
no column; TensorBoard has it as Environment/Episode Length)."""
NO_EPISODE = "no episode ended"
"""Said instead of a NaN reward, success and episode length: the inner trainings ended none."""
EPISODE_STATS = (CUMULATIVE_REWARD, SUCCESS_RATE, EPISODE_LENGTH)


class StatsWriter(Protocol):
    """What the reporter calls: scalars of a meta-step, rows of a table, close at the end."""

    def write(self, meta_step: int, total_env_steps: int, scalars: Mapping[str, float]) -> None: ...

    def write_rows(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def write_summaries(self, meta_step: int, points: Sequence[Point]) -> None: ...

    def close(self) -> None: ...


class NullWriter:
    """A writer that ignores everything; writers override what they handle."""

    def write(self, meta_step: int, total_env_steps: int, scalars: Mapping[str, float]) -> None:
        """Ignore scalars."""

    def write_rows(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Ignore rows."""

    def write_summaries(self, meta_step: int, points: Sequence[Point]) -> None:
        """Ignore the summaries inside a meta-step."""

    def close(self) -> None:
        """Nothing to release."""


class StatsReporter:
    """Fans scalars and rows out to its writers."""

    def __init__(self, writers: Sequence[StatsWriter] = ()) -> None:
        self.writers: list[StatsWriter] = list(writers)

    def write(self, meta_step: int, total_env_steps: int, scalars: Mapping[str, float]) -> None:
        """Send one meta-step's scalars to every writer."""
        for writer in self.writers:
            writer.write(meta_step, total_env_steps, scalars)

    def write_rows(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Send rows of `table` (e.g. META_STEPS_TABLE) to every writer."""
        for writer in self.writers:
            writer.write_rows(table, rows)

    def write_summaries(self, meta_step: int, points: Sequence[Point]) -> None:
        """Send scalars summarised inside a meta-step, each at its env step (before `write`)."""
        if points:
            for writer in self.writers:
                writer.write_summaries(meta_step, points)

    def restore_rows(self, table: str, meta_step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Make `table`'s CSV end with `meta_step`'s `rows`, as the checkpoint's journal holds them.

        A kill between a meta-step's commit and its CSV rows loses the rows; a resume puts them
        back from the checkpoint (and drops any of them written already, so none is doubled).
        """
        for writer in self.writers:
            if isinstance(writer, CSVWriter) and writer.table == table:
                writer.truncate_after(meta_step - 1)
                writer.write_rows(table, rows)

    def close(self) -> None:
        """Close every writer (all of them, even if one fails; the first error is re-raised)."""
        errors: list[Exception] = []
        for writer in self.writers:
            try:
                writer.close()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> StatsReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ConsoleWriter(NullWriter):
    """Logs one ML-Agents-style summary line every `every` meta-steps."""

    def __init__(
        self, every: int = 1, labels: Mapping[str, str] | None = None, name: str | None = None
    ) -> None:
        self.every = max(1, every)
        self.name = name
        """Said first on each line (`seed 1`), for one run among others; None: nothing."""
        self.labels = dict(CONSOLE_LABELS if labels is None else labels)
        self._start = time.monotonic()
        self._latest: dict[str, float] = {}

    def write_summaries(self, meta_step: int, points: Sequence[Point]) -> None:
        """Keep the meta-step's last summaries for its line."""
        self._latest.update(points[-1][1])

    def write(self, meta_step: int, total_env_steps: int, scalars: Mapping[str, float]) -> None:
        """Log the summary line if `meta_step` is a multiple of `every`."""
        scalars, self._latest = {**self._latest, **scalars}, {}
        if meta_step % self.every:
            return
        parts = [
            f"Meta-step: {meta_step}",
            f"Env steps: {total_env_steps}",
            f"Time Elapsed: {time.monotonic() - self._start:.1f} s",
        ]
        ended = not all(math.isnan(scalars.get(t, 0.0)) for t in EPISODE_STATS)
        parts += [
            f"{label}: {scalars[tag]:.4g}"
            for tag, label in self.labels.items()
            if tag in scalars and (ended or tag not in EPISODE_STATS)
        ]
        if not ended:
            parts.insert(3, NO_EPISODE)
        if self.name:
            parts.insert(0, self.name)
        logger.info(". ".join(parts) + ".")


def csv_tables(
    extra_columns: Sequence[str] = (), inner_columns: Sequence[str] | None = None
) -> dict[str, list[str]]:
    """Each CSV table of a run and its columns (inner_updates only with `inner_columns`)."""
    tables = {
        META_STEPS_TABLE: [
            *META_STEP_COLUMNS,
            *(c for c in extra_columns if c not in META_STEP_COLUMNS),
        ]
    }
    if inner_columns is not None:
        tables[INNER_UPDATES_TABLE] = ["meta_step", *(c for c in inner_columns if c != "meta_step")]
    return tables
