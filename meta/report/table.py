"""The report's rows, one per setting: as numbers (report.csv) and as text (console, report.md)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.cells import cell_len
from rich.table import Table

from meta.config.metric import describe
from meta.evaluation.table import grid
from meta.report.heldout import HeldOut, held_out
from meta.report.runs import Run
from meta.report.settings import Estimate, Setting, final, pooled

NOT_REACHED = "not reached"
TRAINING = "training"
"""The title word of what each run's inner trainings measured on their own episodes."""
OBJECTIVE = "objective"


@dataclass(frozen=True)
class Options:
    """What the report pools: the last `last` meta-steps of each run, held-out budgets."""

    last: int = 10
    budgets: tuple[int, ...] = ()
    """Held-out budgets (PPO updates) to show; empty: the largest one meta-eval ran."""
    samples: int = 2000


@dataclass
class Row:
    """One setting, summarised."""

    setting: Setting
    reward: Estimate
    success: Estimate
    objective: Estimate
    held: HeldOut | None

    @property
    def runs(self) -> int:
        """Seeds pooled."""
        return len(self.setting.runs)

    @property
    def running(self) -> int:
        """Runs still holding their lock."""
        return sum(r.running for r in self.setting.runs)


def summarise(settings: Sequence[Setting], options: Options) -> list[Row]:
    """A row per setting."""
    rows = []
    for setting in settings:
        runs = setting.runs
        reward, success = (
            pooled([final(r, column, options.last) for r in runs], options.samples)
            for column in ("mean_reward", "success_rate")
        )
        objective = pooled([r.objective for r in runs], options.samples)
        held = held_out(runs, setting.algorithm, options.budgets, options.samples)
        rows.append(Row(setting, reward, success, objective, held))
    return rows


def budgets_of(rows: Sequence[Row]) -> list[int]:
    """The held-out budgets any row shows."""
    return sorted({b for r in rows if r.held for b in r.held.success})


def numbers(row: Row, budgets: Sequence[int], keys: Sequence[str]) -> dict[str, object]:
    """The row as report.csv holds it (NaN as an empty cell)."""
    runs = row.setting.runs
    out: dict[str, object] = {"setting": row.setting.label}
    out.update({k: row.setting.values.get(k) for k in keys})
    out.update(
        seeds=row.runs,
        running=row.running,
        meta_steps=int(np.mean([r.done for r in runs])),
        env_steps=int(np.mean([_last(r, "total_env_steps") for r in runs])),
        wall_time_s=round(float(np.mean([r.steps["wall_time_s"].sum() for r in runs])), 2),
    )
    for name, estimate in (
        ("reward", row.reward),
        ("success", row.success),
        ("objective", row.objective),
    ):
        out.update({f"{name}_iqm": estimate.iqm, f"{name}_low": estimate.low})
        out[f"{name}_high"] = estimate.high
    for budget in budgets:
        value = row.held.success.get(budget) if row.held else None
        for suffix, v in zip(("", "_low", "_high"), value or (math.nan,) * 3, strict=True):
            out[f"heldout_success@{budget}{suffix}"] = v
    steps = row.held.steps_to_80 if row.held else (math.nan,) * 3
    out.update(steps_to_80=steps[0], steps_to_80_low=steps[1], steps_to_80_high=steps[2])
    out["run_ids"] = " ".join(r.path.name for r in runs)
    return out


def _last(run: Run, column: str) -> float:
    values = run.steps[column]
    return float(values[-1]) if len(values) else 0.0


def to_csv(rows: Sequence[Row], keys: Sequence[str]) -> str:
    """report.csv's text."""
    budgets = budgets_of(rows)
    records = [numbers(r, budgets, keys) for r in rows]
    out = io.StringIO()
    writer = csv.DictWriter(out, list(records[0]), lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if _nan(v) else v for k, v in record.items()})
    return out.getvalue()


def _nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def header(rows: Sequence[Row], last: int) -> list[str]:
    """Column titles of the text table."""
    titles = ["setting", "seeds", "meta-steps", "env steps", "wall time"]
    titles += [f"{TRAINING} reward (last {last})", f"{TRAINING} success (last {last})"]
    if any(r.objective.n for r in rows):
        titles.append(f"{OBJECTIVE} {objective_metric(rows)}".strip())
    titles += [f"held-out success @{b}" for b in budgets_of(rows)]
    if any(r.held for r in rows):
        titles.append("steps to 80%")
    return titles


def objective_metric(rows: Sequence[Row]) -> str:
    """The `optimized_metric` the rows' objectives are values of ("" if none or several)."""
    metrics = {r.objective_metric for row in rows for r in row.setting.runs if r.objective_metric}
    return metrics.pop() if len(metrics) == 1 else ""


def legend(rows: Sequence[Row], last: int) -> list[str]:
    """What the training and objective columns measure, a line each: not the same thing."""
    lines = [
        f"{TRAINING} reward, {TRAINING} success: the inner PPO trainings' own episodes on each "
        f"meta-step's task, each run's mean over its last {last} meta-steps (not after adaptation)"
    ]
    if any(r.objective.n for r in rows):
        metric = objective_metric(rows)
        what = describe(metric) if metric else "each run's own optimized_metric"
        lines.append(f"{OBJECTIVE} {metric}".strip() + f": {what}")
    return lines


def cells(row: Row, rows: Sequence[Row]) -> list[str]:
    """One row of the text table, in `header`'s order."""
    record = numbers(row, budgets_of(rows), ())
    seeds = f"{row.runs}" + (f" ({row.running} running)" if row.running else "")
    out = [row.setting.label, seeds, str(record["meta_steps"]), f"{record['env_steps']:,}"]
    out += [f"{record['wall_time_s']:.0f} s", row.reward.text(), row.success.text()]
    if any(r.objective.n for r in rows):
        out.append(row.objective.text() if row.objective.n else "")
    for budget in budgets_of(rows):
        value = row.held.success.get(budget) if row.held else None
        out.append(_interval(value) if value else "not evaluated")
    if any(r.held for r in rows):
        out.append(_steps(row.held.steps_to_80) if row.held else "not evaluated")
    return out


def _interval(value: tuple[float, float, float]) -> str:
    if math.isnan(value[0]):
        return "not measured"
    return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"


def _steps(value: tuple[float, float, float]) -> str:
    point, low, high = (NOT_REACHED if math.isnan(v) else f"{int(v):,}" for v in value)
    return point if point == NOT_REACHED else f"{point} [{low}, {high}]"


def markdown(rows: Sequence[Row], last: int) -> str:
    """report.md's table."""
    titles = header(rows, last)
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells(r, rows)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def console_tables(rows: Sequence[Row], last: int, width: int) -> list[Table]:
    """The text table for a console `width` columns wide: the columns that do not fit beside the
    setting go to further tables, each with the setting again, and cells wrap between words."""
    titles, body = header(rows, last), [cells(r, rows) for r in rows]
    columns = [[title, *(line[i] for line in body)] for i, title in enumerate(titles)]
    setting = min(_widest(columns[0]), max(_longest_word(columns[0]), width // 3))
    groups: list[list[int]] = [[]]
    used = setting
    for i, column in enumerate(columns[1:], start=1):
        need = _widest(column) + GAP
        if groups[-1] and used + need > width:
            groups.append([])
            used = setting
        groups[-1].append(i)
        used += need
    tables = []
    for n, group in enumerate(groups):
        table = grid(titles[0], *(titles[i] for i in group), right=range(1, len(group) + 1))
        table.title = "meta-report" if n == 0 else None
        table.title_justify = "left"
        for line in body:
            table.add_row(line[0], *(line[i] for i in group))
        tables.append(table)
    return tables


GAP = 2
"""Columns between two cells of a console table."""


def _widest(column: Sequence[str]) -> int:
    return max(cell_len(line) for cell in column for line in cell.splitlines() or [""])


def _longest_word(column: Sequence[str]) -> int:
    return max((cell_len(word) for cell in column for word in cell.split()), default=1)
