"""Steps-to-80: the env steps until a method's success IQM reaches the target, with its interval."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from meta.evaluation.statistics import (
    Measurement,
    area,
    iqm,
    reached_at,
    resampled_iqm,
    stream,
)


@dataclass(frozen=True)
class StepsToTarget:
    """Env steps a method needs for its success IQM to reach the target, with the interval."""

    family: str
    split: str
    method: str
    steps_to_80: float
    """Env steps (the first budget whose success IQM reaches the target, or with
    reach=sustained the first from which it stays at or above it); NaN: not reached."""
    ci_low: float
    ci_high: float
    """Percentile interval over bootstrap replicates; NaN where a replicate never reaches it."""
    adaptation: str = ""
    """The adaptation procedure selected for the method (e.g. `adam lr=0.003 buffer=512`)."""
    selected_on: str = ""
    """The split the procedure was selected on (never `test`)."""
    pretraining: str = ""
    """joint: the PPO settings of the pretraining selected with it."""
    auc: float = math.nan
    """Success AUC: the mean of the success IQM curve over env steps, up to the fewest env steps
    any method of the family and split was measured for (0 to 1)."""
    auc_low: float = math.nan
    auc_high: float = math.nan
    """Percentile interval of the AUC over the same bootstrap replicates as steps-to-80's."""


def steps_to_target(
    measurements: Iterable[Measurement],
    target: float = 0.8,
    *,
    seed: int = 0,
    samples: int = 2000,
    confidence: float = 0.95,
    reach: str = "first",
) -> list[StepsToTarget]:
    """Per family, split and method: env steps until the success IQM reaches `target`.

    `reach` (statistics.REACHES): `first`, the first budget at or above the target, or
    `sustained`, the first from which every later budget is at or above it. The interval comes
    from the same hierarchical bootstrap, each replicate a whole curve (every budget of the
    same drawn seeds) read with the same `reach`; a replicate that never reaches the target
    counts as beyond the largest budget, and an end of the interval there is NaN (not reached).
    """
    curves: dict[tuple[str, str, str], dict[tuple[int, int, int, int], float]] = defaultdict(dict)
    steps: dict[tuple[str, str, str], dict[int, int]] = defaultdict(dict)
    for m in measurements:
        key = (m.family, m.split, m.method)
        curves[key][m.meta_seed, m.task, m.seed, m.budget] = m.success
        steps[key][m.budget] = m.env_steps
    horizon = horizons(steps)
    out = []
    tail = 100.0 * (1.0 - confidence) / 2.0
    for key, points in curves.items():
        budgets = sorted(steps[key])
        x = _curves(points, budgets)
        at = np.array([steps[key][b] for b in budgets], np.float64)
        curve = iqm(x.reshape(-1, len(budgets)), axis=0)
        point = reached_at(curve[None], at, target, reach)[0]
        replicates = resampled_iqm(x, stream(seed, "/".join(key) + "/steps"), samples)
        reached = reached_at(replicates, at, target, reach)
        low = np.percentile(reached, tail, method="lower")
        high = np.percentile(reached, 100.0 - tail, method="higher")
        end = horizon[key[:2]]
        aucs = [area(at, r, end) for r in replicates]
        auc_low, auc_high = np.percentile(aucs, [tail, 100.0 - tail])
        family, split, method = key
        out.append(
            StepsToTarget(
                family,
                split,
                method,
                _finite(point),
                _finite(low),
                _finite(high),
                auc=area(at, curve, end),
                auc_low=float(auc_low),
                auc_high=float(auc_high),
            )
        )
    return out


def horizons(steps: dict[tuple[str, str, str], dict[int, int]]) -> dict[tuple[str, str], float]:
    """Per (family, split): the fewest env steps any method's curve reaches (the AUC's span)."""
    out: dict[tuple[str, str], float] = {}
    for (family, split, _), by_budget in steps.items():
        last = float(max(by_budget.values()))
        out[family, split] = min(out.get((family, split), math.inf), last)
    return out


def _curves(points: dict[tuple[int, int, int, int], float], budgets: list[int]) -> np.ndarray:
    """(meta_seeds, tasks, seeds, budgets) successes; seeds pooled per task if ragged."""
    units = sorted({k[:3] for k in points})
    metas = sorted({u[0] for u in units})
    tasks = sorted({u[1] for u in units})
    per_cell: dict[tuple[int, int], list[int]] = {(m, t): [] for m in metas for t in tasks}
    for m, t, s in units:
        per_cell[m, t].append(s)
    counts = {len(v) for v in per_cell.values()}
    if len(counts) != 1 or any((*u, b) not in points for u in units for b in budgets):
        flat = [[points.get((*u, b), math.nan) for b in budgets] for u in units]
        return np.array(flat, np.float64)[None, None]
    return np.array(
        [
            [[[points[m, t, s, b] for b in budgets] for s in per_cell[m, t]] for t in tasks]
            for m in metas
        ],
        np.float64,
    )


def _finite(value: float) -> float:
    return float(value) if math.isfinite(value) else math.nan
