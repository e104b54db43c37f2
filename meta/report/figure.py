"""report.png: one curve per setting over meta-steps, its band the 95% interval over seeds.

Each run's per-meta-step success and reward are smoothed with a trailing mean over `window`
meta-steps (meta-steps whose inner training ended no episode left out), then pooled over the
setting's seeds as meta-eval pools: the IQM, and the percentile interval of IQMs of seeds drawn
with replacement. At each meta-step the seeds pooled are those with a value there, so one seed
whose window ended no episode does not blank the curve. A curve covers the meta-steps every seed
of its setting has reached; the x-axis spans every meta-step any run has reached.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from meta.evaluation.statistics import iqm, resampled_iqm
from meta.process.atomic import atomic_write_bytes
from meta.report.settings import Setting

PANELS = {"success_rate": "success rate", "mean_reward": "mean reward"}


def smoothed(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over `window` values, NaN left out (NaN where the window has none)."""
    finite = np.isfinite(values)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0))])
    counts = np.concatenate([[0], np.cumsum(finite)])
    end = np.arange(1, len(values) + 1)
    start = np.maximum(end - window, 0)
    n = counts[end] - counts[start]
    return np.where(n > 0, (sums[end] - sums[start]) / np.maximum(n, 1), np.nan)


def curve(
    setting: Setting, column: str, window: int, samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(meta-steps, IQM, low, high) of `column` over the setting's seeds."""
    length = min(r.done for r in setting.runs)
    x = np.arange(length)
    if length == 0:
        return x, x * 1.0, x * 1.0, x * 1.0
    runs = np.stack([smoothed(r.steps[column][:length], window) for r in setting.runs])
    center, low, high = (np.full(length, np.nan) for _ in range(3))
    finite = np.isfinite(runs)
    for seeds in np.unique(finite, axis=1).T:  # meta-steps grouped by the seeds with a value
        if not seeds.any():
            continue
        steps = (finite == seeds[:, None]).all(axis=0)
        values = runs[seeds][:, steps]
        center[steps] = iqm(values, axis=0)
        if len(values) == 1:
            low[steps] = high[steps] = center[steps]
            continue
        replicates = resampled_iqm(values[None, None], np.random.default_rng(0), samples)
        low[steps], high[steps] = np.percentile(replicates, [2.5, 97.5], axis=0)
    return x, center, low, high


def plot(settings: Sequence[Setting], path: Path, samples: int = 500) -> None:
    """Write the figure atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    longest = max((r.done for s in settings for r in s.runs), default=0)
    window = max(1, longest // 20)
    fig = Figure(figsize=(12, 4 + 0.25 * len(settings)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(PANELS))
    for ax, (column, title) in zip(axes, PANELS.items(), strict=True):
        for setting in settings:
            x, center, low, high = curve(setting, column, window, samples)
            (line,) = ax.plot(x, center, label=f"{setting.label} ({len(setting.runs)})")
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(f"{title} (trailing mean of {window}; IQM over seeds, 95% band)")
        ax.set_xlabel("meta-step")
        ax.set_xlim(0, max(longest - 1, 1))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write_bytes(path, buffer.getvalue())
