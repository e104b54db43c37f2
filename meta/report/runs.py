"""A sweep's runs as meta-report reads them: configuration, committed meta-steps, lock, status.

Only files the runs write are read, and nothing is written into them. A run still holding its
lock is read up to its last committed meta-step: the status file's `meta_step` counts the
meta-steps committed, and rows past it (or a row cut short while being written) are left out.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from envs.constants import BEHAVIOR_NAME
from meta.errors import first_line
from meta.evaluation.objective import OBJECTIVE_FILE
from meta.observe.reporter import META_STEPS_TABLE
from meta.process.lock import live_holder
from meta.run.configuration import flatten
from meta.run.directory import CONFIG_FILE, STATUS_FILE

STEPS_FILE = f"{META_STEPS_TABLE}.csv"
NUMBERS = ("meta_step", "mean_reward", "success_rate", "wall_time_s", "total_env_steps")
"""meta_steps.csv columns the report reads as numbers."""


class ReportError(ValueError):
    """Input meta-report cannot read (one line)."""


@dataclass
class Run:
    """One run directory, read."""

    run_id: str
    path: Path
    config: dict[str, Any]
    """The configuration in force, flattened (`meta.outer_lr`: 0.1)."""
    steps: dict[str, np.ndarray] = field(default_factory=dict)
    """Per committed meta-step: `meta_step`, `mean_reward`, `success_rate` (means over the
    step's rows), `wall_time_s` (their sum), `total_env_steps` (the last)."""
    running: bool = False
    objective: float = math.nan
    objective_metric: str = ""
    """The search's `optimized_metric` that `objective` is a value of (empty: none)."""

    @property
    def seed(self) -> int:
        """The run's seed."""
        return int(self.config.get("seed", 0))

    @property
    def done(self) -> int:
        """Meta-steps read."""
        return len(self.steps.get("meta_step", ()))


def is_run(path: Path) -> bool:
    """Whether `path` is a run directory: configuration.yaml, and meta_steps.csv or a status."""
    return (path / CONFIG_FILE).is_file() and (
        (path / STEPS_FILE).is_file() or (path / STATUS_FILE).is_file()
    )


def find_runs(targets: list[str], results_dir: str) -> list[Path]:
    """Run directories: a sweep folder's runs, a run directory itself, or a run id."""
    found: list[Path] = []
    for target in targets:
        path = Path(target)
        if not path.exists() and not path.is_absolute() and len(path.parts) == 1:
            path = Path(results_dir) / target  # a run id
        if not path.exists():
            raise ReportError(f"{target}: no such directory (nor a run id in {results_dir})")
        if not path.is_dir():
            raise ReportError(f"{target}: not a directory")
        runs = [path] if is_run(path) else sorted(p for p in path.iterdir() if is_run(p))
        if not runs:
            raise ReportError(
                f"{target}: no runs in it (no folder with {CONFIG_FILE} and {STEPS_FILE})"
            )
        found += [r for r in runs if r.resolve() not in {f.resolve() for f in found}]
    return found


def read_run(path: Path) -> Run:
    """Read one run; a damaged file is a ReportError naming it."""
    try:
        config = yaml.safe_load((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ReportError(f"{path / CONFIG_FILE}: unreadable ({first_line(error)})") from None
    if not isinstance(config, dict) or "meta" not in config:
        raise ReportError(f"{path / CONFIG_FILE}: not a meta-train configuration")
    run = Run(str(config.get("run_id") or path.name), path, flatten(config))
    run.running = live_holder(path.parent, path.name) is not None
    committed = _committed(path) if run.running else None
    run.steps = read_steps(path / STEPS_FILE, committed)
    run.objective, run.objective_metric = _objective(path)
    return run


def _committed(path: Path) -> int | None:
    """Meta-steps a live run has committed (its status says); None when it has no status yet."""
    try:
        status = json.loads((path / STATUS_FILE).read_text(encoding="utf-8"))
        return int(status[BEHAVIOR_NAME]["meta_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0  # started, nothing committed (or the status is being replaced: read nothing)


def read_steps(path: Path, committed: int | None = None) -> dict[str, np.ndarray]:
    """meta_steps.csv as per-meta-step arrays, rows of meta-steps >= `committed` left out."""
    if not path.is_file():
        return {name: np.zeros(0) for name in NUMBERS}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ReportError(f"{path}: unreadable ({first_line(error)})") from None
    complete = text[: text.rfind("\n") + 1]  # a row cut short while being written is not in
    rows = list(csv.reader(io.StringIO(complete)))
    if not rows:
        raise ReportError(f"{path}: empty (no header)")
    header, body = rows[0], rows[1:]
    missing = [c for c in NUMBERS if c not in header]
    if missing:
        raise ReportError(f"{path}: damaged: no column {', '.join(missing)} in its header")
    index = {name: header.index(name) for name in NUMBERS}
    values: dict[int, list[list[float]]] = {}
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise ReportError(
                f"{path}: damaged: line {line} has {len(row)} fields, not {len(header)}"
            )
        try:
            numbers = [_number(row[index[name]]) for name in NUMBERS]
        except ValueError:
            raise ReportError(
                f"{path}: damaged: line {line} holds a value that is not a number"
            ) from None
        step = int(numbers[0])
        if committed is None or step < committed:
            values.setdefault(step, []).append(numbers)
    return _per_step(values)


def _per_step(values: dict[int, list[list[float]]]) -> dict[str, np.ndarray]:
    """One entry per meta-step from its rows (a meta-batch has several)."""
    steps = sorted(values)
    out: dict[str, list[float]] = {name: [] for name in NUMBERS}
    for step in steps:
        rows = np.array(values[step], np.float64)
        out["meta_step"].append(step)
        for column in ("mean_reward", "success_rate"):
            finite = rows[:, NUMBERS.index(column)]
            finite = finite[np.isfinite(finite)]
            out[column].append(float(finite.mean()) if finite.size else math.nan)
        out["wall_time_s"].append(float(np.nansum(rows[:, NUMBERS.index("wall_time_s")])))
        out["total_env_steps"].append(float(rows[-1, NUMBERS.index("total_env_steps")]))
    return {name: np.array(column, np.float64) for name, column in out.items()}


def _number(text: str) -> float:
    """A CSV cell as a float; an empty cell (or `nan`) is NaN."""
    return math.nan if text.strip() == "" else float(text)


def _objective(path: Path) -> tuple[float, str]:
    """A search trial's objective value and metric, (NaN, "") when the run has none."""
    try:
        record = json.loads((path / OBJECTIVE_FILE).read_text(encoding="utf-8"))
        return float(record["value"]), str(record.get("optimized_metric", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return math.nan, ""
