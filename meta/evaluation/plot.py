"""meta-eval's figure: adaptation curves with confidence bands (adaptation.png)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from meta.evaluation.statistics import Cell
from meta.process.atomic import atomic_write_bytes

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
