"""meta-eval's report: adaptation curves with confidence bands, and the console table."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

from meta.evaluation.statistics import Cell
from meta.run.atomic import atomic_write_bytes

METRIC_LABELS = {"success": "success rate", "reward": "mean reward"}


def panels(cells: Sequence[Cell]) -> list[tuple[str, str]]:
    """(family, split) pairs in the order they first appear."""
    return list(dict.fromkeys((c.family, c.split) for c in cells))


def methods(cells: Sequence[Cell]) -> list[str]:
    """Methods in the order they first appear."""
    return list(dict.fromkeys(c.method for c in cells))


def _curve(cells: Sequence[Cell], family: str, split: str, method: str) -> list[Cell]:
    return sorted(
        (c for c in cells if (c.family, c.split, c.method) == (family, split, method)),
        key=lambda c: c.budget,
    )


def plot(
    cells: Sequence[Cell],
    path: Path,
    confidence: float = 0.95,
    per_seed: Sequence[Cell] = (),
    target: float | None = 0.8,
) -> None:
    """adaptation.png: one column per family x split, success above reward, IQM and CI bands.

    With several meta-training seeds, `per_seed` cells add each seed's IQM as a thin line of
    its method's colour; `target` draws the success level that steps_to_80.csv reports.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = panels(cells)
    fig = Figure(figsize=(4.0 * len(columns), 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(columns), squeeze=False, sharex="col")
    for col, (family, split) in enumerate(columns):
        for row, metric in enumerate(METRIC_LABELS):
            ax = axes[row][col]
            for method in methods(cells):
                curve = _curve(cells, family, split, method)
                x = [c.env_steps for c in curve]
                y = [getattr(c, f"{metric}_iqm") for c in curve]
                low = [getattr(c, f"{metric}_low") for c in curve]
                high = [getattr(c, f"{metric}_high") for c in curve]
                (line,) = ax.plot(x, y, marker="o", markersize=3, label=method)
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
                for seeds in sorted({c.meta_seeds for c in per_seed}) if len(per_seed) else []:
                    mine = _curve(
                        [c for c in per_seed if c.meta_seeds == seeds], family, split, method
                    )
                    ax.plot(
                        [c.env_steps for c in mine],
                        [getattr(c, f"{metric}_iqm") for c in mine],
                        color=line.get_color(),
                        linewidth=0.7,
                        alpha=0.5,
                    )
            ax.set_title(f"{family} ({split} tasks)" if row == 0 else "")
            ax.set_ylabel(f"{METRIC_LABELS[metric]} (IQM)")
            ax.grid(alpha=0.3)
            if metric == "success":
                ax.set_ylim(-0.03, 1.03)
                if target is not None:
                    ax.axhline(target, color="grey", linewidth=0.7, linestyle=":")
            if row == 1:
                ax.set_xlabel("adaptation env steps")
    seeds = " (thin: each meta-training seed)" if len({c.meta_seeds for c in per_seed}) > 1 else ""
    axes[0][0].legend(title=f"start ({confidence:.0%} CI){seeds}", fontsize="small")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    atomic_write_bytes(path, buffer.getvalue())


def _ci(cell: Cell | None, metric: str) -> str:
    if cell is None:
        return "-"
    iqm, low, high = (getattr(cell, f"{metric}_{k}") for k in ("iqm", "low", "high"))
    return f"{iqm:6.3f} [{low:6.3f}, {high:6.3f}]"


def _steps(value: float) -> str:
    return "not reached" if math.isnan(value) else str(int(value))


def table(cells: Sequence[Cell], target: float = 0.8, confidence: float = 0.95) -> str:
    """The summary as text: IQM [CI] per env steps and method, then steps to the success target."""
    names, width = methods(cells), 25
    lines = []
    for family, split in panels(cells):
        panel = [c for c in cells if (c.family, c.split) == (family, split)]
        for metric in ("success", "reward"):
            lines.append(
                f"{family} / {split} tasks: {METRIC_LABELS[metric]}, "
                f"IQM [{confidence:.0%} CI] over {max(c.n for c in panel)} task-seeds"
            )
            lines.append(f"{'env steps':>9}  " + "".join(f"{m:<{width}}" for m in names))
            # One axis for every start: procedures with other update sizes sit on other rows.
            for steps in sorted({c.env_steps for c in panel}):
                row = {c.method: c for c in panel if c.env_steps == steps}
                text = "".join(f"{_ci(row.get(m), metric):<{width}}" for m in names)
                lines.append(f"{steps:>9}  {text}")
            lines.append("")
    lines.append(f"Adaptation env steps until the success IQM reaches {target:g} (steps_to_80.csv)")
    lines.append(f"{'family':<12} {'split':<10} " + "".join(f"{m:<14}" for m in names))
    for family, split in panels(cells):
        reached = {c.method: c.steps_to_80 for c in cells if (c.family, c.split) == (family, split)}
        text = "".join(f"{_steps(reached.get(m, math.nan)):<14}" for m in names)
        lines.append(f"{family:<12} {split:<10} {text}")
    procedures = dict.fromkeys((c.family, c.method, c.adaptation, c.pretraining) for c in cells)
    lines.append("Adaptation procedures (selected on the selection split)")
    for family, method, adaptation, pretraining in procedures:
        pre = f" (pretrained: {pretraining})" if pretraining else ""
        lines.append(f"  {family:<12} {method:<10} {adaptation}{pre}")
    return "\n".join(lines)
