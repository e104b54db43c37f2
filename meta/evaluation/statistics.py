"""meta-eval's statistics: interquartile mean, stratified bootstrap interval, steps-to-threshold."""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

METRICS = ("mean_reward", "success")


@dataclass(frozen=True)
class Measurement:
    """One policy measured on one task after `budget` adaptation updates (adaptation.csv row)."""

    method: str
    family: str
    split: str
    task: int
    seed: int
    budget: int
    env_steps: int
    mean_reward: float
    success: float
    episodes: int
    task_params: str


@dataclass(frozen=True)
class Cell:
    """IQM and confidence interval of one method, family, split and budget (summary.csv row)."""

    method: str
    family: str
    split: str
    budget: int
    env_steps: int
    n: int
    reward_iqm: float
    reward_low: float
    reward_high: float
    success_iqm: float
    success_low: float
    success_high: float
    steps_to_threshold: float = math.nan
    """Env steps to reach threshold x the best final success of the panel; NaN: not reached."""


def iqm(values: np.ndarray | Sequence[float], axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean after cutting floor(n/4) values at each end (rliable's)."""
    x = np.sort(np.asarray(values, np.float64), axis=axis)
    n = x.shape[axis]
    cut = int(0.25 * n)
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def bootstrap_ci(
    values: np.ndarray,
    rng: np.random.Generator,
    samples: int = 2000,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of the IQM under a bootstrap stratified by row (task).

    `values` is (tasks, seeds): each resample draws seeds with replacement within every task,
    as rliable's StratifiedBootstrap does, so each task keeps its weight.
    """
    x = np.atleast_2d(np.asarray(values, np.float64))
    tasks, seeds = x.shape
    picks = rng.integers(0, seeds, size=(samples, tasks, seeds))
    resampled = x[np.arange(tasks)[None, :, None], picks].reshape(samples, -1)
    stats = iqm(resampled, axis=1)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


def steps_to_threshold(steps: Sequence[float], values: Sequence[float], target: float) -> float:
    """The first of `steps` (ascending) whose value reaches `target`; NaN when none does."""
    for step, value in zip(steps, values, strict=True):
        if value >= target:
            return float(step)
    return math.nan


def _matrix(values: dict[int, list[float]]) -> np.ndarray:
    """Values by task as a (tasks, seeds) matrix; one stratum if the tasks' counts differ."""
    rows = [values[t] for t in sorted(values)]
    if len({len(r) for r in rows}) == 1:
        return np.array(rows, np.float64)
    return np.array([v for r in rows for v in r], np.float64)[None, :]


def _rng(seed: int, key: str) -> np.random.Generator:
    """A generator per cell, so a cell's interval does not depend on the others."""
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def summarise(
    measurements: Iterable[Measurement],
    *,
    seed: int = 0,
    samples: int = 2000,
    confidence: float = 0.95,
    threshold: float = 0.8,
) -> list[Cell]:
    """Cells per method, family, split and budget, with steps-to-threshold per panel."""
    groups: dict[tuple[str, str, str, int], dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: {m: defaultdict(list) for m in METRICS}
    )
    env_steps: dict[tuple[str, str, str, int], int] = {}
    rank: dict[tuple[str, ...], int] = {}
    for m in measurements:
        rank.setdefault((m.family, m.split), len(rank))
        rank.setdefault((m.method,), len(rank))
        key = (m.method, m.family, m.split, m.budget)
        for metric in METRICS:
            groups[key][metric][m.task].append(getattr(m, metric))
        env_steps[key] = m.env_steps
    cells = []
    for key, by_metric in groups.items():
        reward, success = (_matrix(by_metric[metric]) for metric in METRICS)
        name = "/".join(map(str, key))
        reward_ci = bootstrap_ci(reward, _rng(seed, name), samples, confidence)
        success_ci = bootstrap_ci(success, _rng(seed + 1, name), samples, confidence)
        method, family, split, budget = key
        cells.append(
            Cell(
                method,
                family,
                split,
                budget,
                env_steps[key],
                reward.size,
                float(iqm(reward.ravel())),
                *reward_ci,
                float(iqm(success.ravel())),
                *success_ci,
            )
        )
    cells.sort(key=lambda c: (rank[c.family, c.split], rank[(c.method,)], c.budget))
    return _with_thresholds(cells, threshold)


def best_final_success(cells: Sequence[Cell]) -> dict[tuple[str, str], float]:
    """Per (family, split): the highest success IQM any method reaches at its largest budget."""
    final: dict[tuple[str, str, str], Cell] = {}
    for cell in cells:
        key = (cell.family, cell.split, cell.method)
        if key not in final or cell.budget > final[key].budget:
            final[key] = cell
    best: dict[tuple[str, str], float] = {}
    for (family, split, _), cell in final.items():
        best[family, split] = max(best.get((family, split), -math.inf), cell.success_iqm)
    return best


def _with_thresholds(cells: list[Cell], threshold: float) -> list[Cell]:
    """Fill steps_to_threshold; nothing is reached in a panel where no method ever succeeds."""
    from dataclasses import replace

    best = best_final_success(cells)
    curves: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for cell in cells:
        curves[cell.family, cell.split, cell.method].append(cell)
    reached: dict[tuple[str, str, str], float] = {}
    for key, curve in curves.items():
        top = best[key[0], key[1]]
        curve.sort(key=lambda c: c.budget)
        reached[key] = (
            steps_to_threshold(
                [c.env_steps for c in curve], [c.success_iqm for c in curve], threshold * top
            )
            if top > 0
            else math.nan
        )
    return [replace(c, steps_to_threshold=reached[c.family, c.split, c.method]) for c in cells]
