"""A table of the run (meta_steps.csv, inner_updates.csv): rows appended, repaired on resume."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from meta.process.atomic import StrPath, atomic_write_text


def _cell(value: Any) -> Any:
    """Format a value for a CSV cell: JSON for containers, Python numbers for 0-d arrays."""
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return "" if value is None else value


def header_error(path: Path, columns: Sequence[str], header: Sequence[str] | None = None) -> str:
    """Why the table at `path` cannot take rows of `columns` ("" if it can, or does not exist)."""
    if header is None:
        if not path.is_file():
            return ""
        with path.open(newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), None)
        if header is None:
            return ""
    header, columns = list(header), list(columns)
    if header == columns[: len(header)] and len(header) < len(columns):
        return f"{path} was written before its columns {columns[len(header) :]} existed"
    if header != columns:
        return f"{path}: header {header} differs from columns {columns}"
    return ""


class CSVWriter:
    """Appends rows of one table to a CSV with a fixed header; copes with resumed runs."""

    def __init__(
        self,
        path: StrPath,
        columns: Sequence[str],
        table: str | None = None,
        step_column: str = "meta_step",
        truncate_after: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.columns = list(columns)
        self.table = table or self.path.stem
        self.step_column = step_column
        if step_column not in self.columns:
            raise ValueError(f"{self.path}: columns must include {step_column!r}")
        self._file: TextIO | None = None
        self._open(truncate_after)

    def _open(self, truncate_after: int | None) -> None:
        exists = self._repair(truncate_after)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, self.columns, lineterminator="\n")
        if not exists:
            self._writer.writeheader()
            self._file.flush()

    def _repair(self, truncate_after: int | None) -> bool:
        """Check the header, drop a row cut short by a crash and rows past `truncate_after`."""
        if not self.path.is_file():
            return False
        text = self.path.read_text(encoding="utf-8")
        complete = text[: text.rfind("\n") + 1]
        rows = list(csv.reader(io.StringIO(complete)))
        if not rows:
            self.path.unlink()
            return False
        error = header_error(self.path, self.columns, rows[0])
        if error:
            raise ValueError(error)
        if truncate_after is not None:
            i = self.columns.index(self.step_column)
            rows[1:] = [
                row
                for row in rows[1:]
                if len(row) == len(self.columns) and _step(row[i]) <= truncate_after
            ]
        if complete != text or truncate_after is not None:
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerows(rows)
            atomic_write_text(self.path, out.getvalue())
        return True

    def truncate_after(self, meta_step: int) -> None:
        """Drop rows whose step column exceeds `meta_step` (and unreadable rows), atomically."""
        self.close()
        self._open(meta_step)

    def write(self, meta_step: int, total_env_steps: int, scalars: Mapping[str, float]) -> None:
        """Ignore scalars: a table takes rows."""

    def write_summaries(self, meta_step: int, points: Sequence[Any]) -> None:
        """Ignore summaries: a table takes rows."""

    def write_rows(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append rows if `table` is this writer's; unknown keys raise ValueError."""
        if table != self.table or self._file is None:
            return
        for row in rows:
            self._writer.writerow({key: _cell(value) for key, value in row.items()})
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _step(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.inf
