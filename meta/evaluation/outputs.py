"""meta-eval's output files: the statistics of every measurement, as CSV tables and a figure."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from meta.evaluation.improvement import BASELINES, improvements
from meta.evaluation.plan import EvalPlan
from meta.evaluation.plot import plot
from meta.evaluation.progress import (
    STATISTICS,
    STATISTICS_STEPS,
    EvalProgress,
)
from meta.evaluation.selection import SelectionRow, chosen
from meta.evaluation.statistics import Cell, Measurement, Resampling, summarise
from meta.evaluation.steps import steps_to_target
from meta.process.atomic import atomic_write_text


def write_outputs(
    p: EvalPlan,
    measurements: list[Measurement],
    tried: list[Measurement],
    selection: list[SelectionRow],
    bar: EvalProgress,
) -> list[Cell]:
    """Every output file; returns the pooled cells."""
    ev = p.setting.eval
    order = {split: i for i, split in enumerate(ev.splits)}
    measurements.sort(key=lambda m: order[m.split])
    stats: Resampling = {
        "seed": p.setting.seed,
        "samples": ev.bootstrap_samples,
        "confidence": ev.confidence,
    }
    bar.begin(STATISTICS, len(STATISTICS_STEPS))
    target, reach = ev.success_target, ev.reach
    cells = summarise(measurements, **stats, target=target, reach=reach)
    bar.advance(STATISTICS)
    per_seed = [
        cell
        for run in p.runs
        for cell in summarise(
            [m for m in measurements if m.meta_seed == run.seed],
            **stats,
            target=target,
            reach=reach,
        )
    ]
    bar.advance(STATISTICS)
    picked = chosen(selection)
    steps = [
        replace(
            s,
            adaptation=picked[s.family, s.method][1],
            pretraining=picked[s.family, s.method][0],
            selected_on=ev.selection_split,
        )
        for s in steps_to_target(measurements, target, **stats, reach=reach)
    ]
    bar.advance(STATISTICS)
    write_csv(p.out_dir / "selection.csv", selection)
    write_csv(p.out_dir / "selection_adaptation.csv", tried)
    write_csv(p.out_dir / "adaptation.csv", measurements)
    write_csv(p.out_dir / "summary.csv", cells)
    write_csv(p.out_dir / "summary_per_seed.csv", per_seed)
    write_csv(p.out_dir / "steps_to_80.csv", steps)
    learned = {m.method for m in measurements} - set(BASELINES)
    improvement = improvements(measurements, sorted(learned), **stats)
    if improvement:  # a run that is itself the joint baseline has no meta-learned start
        write_csv(p.out_dir / "improvement.csv", improvement)
    bar.advance(STATISTICS)
    plot(cells, p.out_dir / "adaptation.png", ev.confidence, per_seed, ev.success_target)
    bar.advance(STATISTICS)
    return cells


def write_csv(path: Path, rows: Sequence[Any]) -> None:
    """Dataclass rows as CSV, atomically (NaN as an empty cell)."""
    if not rows:
        raise ValueError(f"nothing to write to {path}")
    names = [f.name for f in fields(rows[0])]
    text = io.StringIO()
    writer = csv.DictWriter(text, names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in asdict(row).items()})
    atomic_write_text(path, text.getvalue())


def _cell(value: Any) -> Any:
    return "" if isinstance(value, float) and value != value else value
