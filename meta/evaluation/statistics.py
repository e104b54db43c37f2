"""meta-eval's statistics: interquartile mean, hierarchical bootstrap interval, steps-to-80.

Scores come as (meta-training seeds, tasks, adaptation seeds). A bootstrap replicate draws the
meta-training seeds with replacement (all tasks share the draw: a meta-learned start is good or
bad on every task at once), then, within each drawn seed and task, as many adaptation seeds as
there are, with replacement (stratified by task, as rliable's StratifiedBootstrap), and takes
the IQM of everything drawn. With one meta-training seed this is rliable's stratified bootstrap.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

import numpy as np

from meta.config.evaluation import REACHES

METRICS = ("mean_reward", "success")


class Resampling(TypedDict):
    """The bootstrap's options, as the statistics take them by keyword."""

    seed: int
    samples: int
    confidence: float


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
    meta_seed: int = 0
    """Seed of the meta-training run whose start (and baseline) this adapted."""
    win_rate_random: float = float("nan")
    """Games of teams: the fraction of games won against a random policy (their success)."""
    win_rate_theta: float = float("nan")
    """Games of teams: the fraction won against the run's meta-learned weights (initial theta)."""
    win_rate_reference: float = float("nan")
    """Games of teams: the fraction won against the fixed reference policy of the project."""
    adaptation: str = ""
    """The adaptation procedure (e.g. `adam lr=0.003 buffer=512`)."""
    pretraining: str = ""
    """joint: the PPO settings its start was pretrained with."""


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
    steps_to_80: float = math.nan
    """Env steps of the budget where the success IQM reached eval.success_target (the first at
    or above it, or with eval.reach=sustained the first from which it stays there); NaN: not
    reached (the same figure as steps_to_80.csv)."""
    meta_seeds: str = ""
    """The meta-training seeds the cell pools (`0` for one run's own cell, `0+1+2` pooled)."""
    adaptation: str = ""
    """The adaptation procedure the method was measured with."""
    pretraining: str = ""
    """joint: the PPO settings its start was pretrained with."""


def iqm(values: np.ndarray | Sequence[float], axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean after cutting floor(n/4) values at each end (rliable's)."""
    x = np.sort(np.asarray(values, np.float64), axis=axis)
    n = x.shape[axis]
    cut = int(0.25 * n)
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def resampled_iqm(values: np.ndarray, rng: np.random.Generator, samples: int) -> np.ndarray:
    """IQMs of `samples` bootstrap replicates of (meta_seeds, tasks, seeds, *rest) scores.

    Returns (samples, *rest): trailing axes (budgets) share each replicate's draw, so a
    replicate is a whole adaptation curve. (tasks, seeds) input is one meta-training seed.
    """
    x = np.asarray(values, np.float64)
    if x.ndim < 3:
        x = np.atleast_2d(x)[None]
    metas, tasks, seeds = x.shape[:3]
    if metas == 1:
        picks = rng.integers(0, seeds, size=(samples, tasks, seeds))
        drawn = x[0][np.arange(tasks)[None, :, None], picks]
    else:
        chosen = rng.integers(0, metas, size=(samples, metas))
        picks = rng.integers(0, seeds, size=(samples, metas, tasks, seeds))
        drawn = x[chosen[:, :, None, None], np.arange(tasks)[None, None, :, None], picks]
    return iqm(drawn.reshape(samples, -1, *x.shape[3:]), axis=1)


def bootstrap_ci(
    values: np.ndarray,
    rng: np.random.Generator,
    samples: int = 2000,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of the IQM under the hierarchical bootstrap (module docstring).

    `values` is (tasks, seeds) for one meta-training run, exactly rliable's stratified
    bootstrap, or (meta_seeds, tasks, seeds) for several.
    """
    stats = resampled_iqm(values, rng, samples)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


def area(x: np.ndarray, y: np.ndarray, horizon: float) -> float:
    """Mean of the piecewise-linear curve y(x) over [0, horizon] (y(0) at x < x[0])."""
    if horizon <= 0:
        return float(y[0])
    grid = np.unique(np.concatenate([x[x <= horizon], [0.0, horizon]]))
    values = np.interp(grid, x, y)
    return float(np.sum((values[1:] + values[:-1]) * np.diff(grid)) / 2.0 / horizon)


def reached_at(curves: np.ndarray, at: np.ndarray, target: float, reach: str) -> np.ndarray:
    """Per row of (n, budgets) curves, the `at` of the budget where it reached `target` (inf).

    `first`: the first budget at or above the target. `sustained`: the first budget from which
    every later budget is at or above it too (a curve that falls below it at its last budget
    has not reached it).
    """
    if reach not in REACHES:
        raise ValueError(f"unknown reach {reach!r} (use one of {REACHES})")
    hit = np.asarray(curves) >= target
    if reach == "sustained":  # at or above from here to the end: a reversed running `and`
        hit = np.logical_and.accumulate(hit[:, ::-1], axis=1)[:, ::-1]
    return np.where(hit.any(axis=1), np.asarray(at)[hit.argmax(axis=1)], np.inf)


def steps_to_threshold(
    steps: Sequence[float], values: Sequence[float], target: float, reach: str = "first"
) -> float:
    """The one of `steps` (ascending) where `values` reached `target` (`reach`); NaN: never."""
    if len(steps) != len(values):
        raise ValueError(f"{len(steps)} steps for {len(values)} values")
    if not len(steps):
        return math.nan
    at = np.asarray(steps, np.float64)
    (value,) = reached_at(np.asarray(values, np.float64)[None], at, target, reach)
    return float(value) if math.isfinite(value) else math.nan


def _matrix(values: dict[int, dict[int, list[float]]]) -> np.ndarray:
    """Values by meta-seed and task as (meta_seeds, tasks, seeds); pooled if ragged."""
    tasks = sorted({t for by_task in values.values() for t in by_task})
    grid = [[values[m].get(t, []) for t in tasks] for m in sorted(values)]
    if len({len(cell) for row in grid for cell in row}) == 1:
        return np.array(grid, np.float64)
    return np.array([v for row in grid for cell in row for v in cell], np.float64)[None, None, :]


def stream(seed: int, key: str) -> np.random.Generator:
    """A generator per cell, so a cell's interval does not depend on the others."""
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def summarise(
    measurements: Iterable[Measurement],
    *,
    seed: int = 0,
    samples: int = 2000,
    confidence: float = 0.95,
    target: float = 0.8,
    reach: str = "first",
) -> list[Cell]:
    """Cells per method, family, split and budget, with each curve's steps to `target`."""
    groups: dict[tuple[str, str, str, int], dict[str, dict[int, dict[int, list[float]]]]] = (
        defaultdict(lambda: {m: defaultdict(lambda: defaultdict(list)) for m in METRICS})
    )
    seeds: set[int] = set()
    env_steps: dict[tuple[str, str, str, int], int] = {}
    labels: dict[tuple[str, str], tuple[str, str]] = {}
    rank: dict[tuple[str, ...], int] = {}
    for m in measurements:
        rank.setdefault((m.family, m.split), len(rank))
        rank.setdefault((m.method,), len(rank))
        key = (m.method, m.family, m.split, m.budget)
        for metric in METRICS:
            groups[key][metric][m.meta_seed][m.task].append(getattr(m, metric))
        env_steps[key] = m.env_steps
        labels[m.method, m.family] = (m.adaptation, m.pretraining)
        seeds.add(m.meta_seed)
    cells = []
    for key, by_metric in groups.items():
        reward, success = (_matrix(by_metric[metric]) for metric in METRICS)
        name = "/".join(map(str, key))
        reward_ci = bootstrap_ci(reward, stream(seed, name), samples, confidence)
        success_ci = bootstrap_ci(success, stream(seed + 1, name), samples, confidence)
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
                meta_seeds="+".join(map(str, sorted(seeds))),
                adaptation=labels[method, family][0],
                pretraining=labels[method, family][1],
            )
        )
    cells.sort(key=lambda c: (rank[c.family, c.split], rank[(c.method,)], c.budget))
    return _with_steps(cells, target, reach)


def _with_steps(cells: list[Cell], target: float, reach: str) -> list[Cell]:
    """Fill steps_to_80: the budget where each curve's success IQM reached `target` (`reach`)."""
    curves: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for cell in cells:
        curves[cell.family, cell.split, cell.method].append(cell)
    reached: dict[tuple[str, str, str], float] = {}
    for key, curve in curves.items():
        curve.sort(key=lambda c: c.budget)
        steps, values = [c.env_steps for c in curve], [c.success_iqm for c in curve]
        reached[key] = steps_to_threshold(steps, values, target, reach)
    return [replace(c, steps_to_80=reached[c.family, c.split, c.method]) for c in cells]
