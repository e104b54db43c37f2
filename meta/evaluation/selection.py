"""Each start's adaptation procedure, chosen on selection tasks (never on `test`).

A candidate is a start (method) with an adaptation procedure and, for joint, the PPO settings
it was pretrained with. Per method and family, the candidate whose success IQM on the
selection split reaches the target (eval.reach: first, or sustained) in the fewest env steps
wins; ties go to the larger area under its success curve (over the env steps every candidate
of the method was measured for).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from meta.evaluation.statistics import Measurement, area, iqm
from meta.evaluation.steps import steps_to_target


@dataclass(frozen=True)
class SelectionRow:
    """One candidate measured on the selection split (selection.csv row)."""

    family: str
    split: str
    method: str
    pretraining: str
    adaptation: str
    steps_to_80: float
    ci_low: float
    ci_high: float
    auc: float
    """Mean success IQM over the env steps every candidate of the method reaches (0 to 1)."""
    final_success: float
    """Success IQM at the largest budget."""
    selected: bool
    trial: int | None = None
    """eval.search: the trial (from 0) of the start's search; empty for the grid."""


Key = tuple[str, str, str]
"""(method, pretraining, adaptation): one candidate."""


def _curve(rows: Sequence[Measurement]) -> tuple[np.ndarray, np.ndarray]:
    """The candidate's success IQM per budget, against its env steps."""
    by_budget: dict[int, list[float]] = defaultdict(list)
    steps: dict[int, int] = {}
    for m in rows:
        by_budget[m.budget].append(m.success)
        steps[m.budget] = m.env_steps
    budgets = sorted(by_budget)
    x = np.array([steps[b] for b in budgets], np.float64)
    return x, np.array([float(iqm(by_budget[b])) for b in budgets], np.float64)


def select(
    measurements: Iterable[Measurement],
    split: str,
    target: float,
    *,
    seed: int = 0,
    samples: int = 2000,
    confidence: float = 0.95,
    horizon: float | None = None,
    reach: str = "first",
) -> list[SelectionRow]:
    """Every candidate on `split`, the chosen one per method and family marked `selected`.

    Only measurements of `split` are read: results on any other split cannot change the
    choice. `horizon`: the env steps of every AUC (None: the fewest any candidate of the
    method was measured for). `reach`: when a curve has reached the target (eval.reach).
    """
    groups: dict[tuple[str, Key], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.split == split:
            groups[m.family, (m.method, m.pretraining, m.adaptation)].append(m)
    span: dict[tuple[str, str], float] = {}
    curves = {key: _curve(rows) for key, rows in groups.items()}
    for (family, (method, _, _)), (x, _) in curves.items():
        span[family, method] = min(span.get((family, method), math.inf), float(x[-1]))
    out = []
    for (family, key), rows in groups.items():
        (steps,) = steps_to_target(
            rows, target, seed=seed, samples=samples, confidence=confidence, reach=reach
        )
        x, y = curves[family, key]
        out.append(
            SelectionRow(
                family,
                split,
                *key,
                steps.steps_to_80,
                steps.ci_low,
                steps.ci_high,
                area(x, y, horizon or span[family, key[0]]),
                float(y[-1]),
                False,
            )
        )
    return _mark_best(out)


def rank(row: SelectionRow) -> tuple[float, float]:
    """The order candidates are chosen in: fewer steps to the target, then the larger AUC."""
    steps = row.steps_to_80 if math.isfinite(row.steps_to_80) else math.inf
    return steps, -row.auc


def _mark_best(rows: list[SelectionRow]) -> list[SelectionRow]:
    """Mark the first best-ranked candidate of each method and family."""
    best: dict[tuple[str, str], SelectionRow] = {}
    for row in rows:
        current = best.get((row.family, row.method))
        if current is None or rank(row) < rank(current):
            best[row.family, row.method] = row
    chosen = {id(r) for r in best.values()}
    return [
        SelectionRow(**{**r.__dict__, "selected": True}) if id(r) in chosen else r for r in rows
    ]


def chosen(rows: Sequence[SelectionRow]) -> dict[tuple[str, str], tuple[str, str]]:
    """(family, method) -> (pretraining, adaptation) of the selected candidate."""
    return {(r.family, r.method): (r.pretraining, r.adaptation) for r in rows if r.selected}
