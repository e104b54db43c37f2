"""rliable's probability of improvement of each meta-learned start over each baseline.

A run is one adaptation (meta-training seed and adaptation seed) on one task, scored by its
success AUC: the mean of its success curve over env steps, up to the fewest env steps any
start of the family and split was measured for. rliable's `probability_of_improvement` gives
P(X > Y) averaged over tasks (computed here in one array operation, the same number), its
interval rliable's stratified independent bootstrap
(`library.get_interval_estimates`) with eval.bootstrap_samples replicates.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from meta.evaluation.runs import JOINT_RUN
from meta.evaluation.statistics import Measurement, area
from meta.evaluation.steps import horizons

BASELINES = ("scratch", JOINT_RUN)
"""The starts meta-learned ones are compared with."""


@dataclass(frozen=True)
class Improvement:
    """P(method's AUC > baseline's) on one family and split, with its interval."""

    family: str
    split: str
    method: str
    baseline: str
    probability: float
    ci_low: float
    ci_high: float


def run_aucs(measurements: Iterable[Measurement]) -> dict[tuple[str, str, str], np.ndarray]:
    """Per (family, split, method): success AUCs as (runs, tasks), runs in seed order."""
    curves: dict[tuple[str, str, str], dict[tuple[int, int, int], dict[int, tuple[int, float]]]]
    curves = defaultdict(lambda: defaultdict(dict))
    steps: dict[tuple[str, str, str], dict[int, int]] = defaultdict(dict)
    for m in measurements:
        key = (m.family, m.split, m.method)
        curves[key][m.task, m.meta_seed, m.seed][m.budget] = (m.env_steps, m.success)
        steps[key][m.budget] = m.env_steps
    horizon = horizons(steps)
    out = {}
    for key, runs in curves.items():
        by_task: dict[int, list[float]] = defaultdict(list)
        for (task, _, _), curve in sorted(runs.items()):
            points = [curve[b] for b in sorted(curve)]
            x, y = (np.array(v, np.float64) for v in zip(*points, strict=True))
            by_task[task].append(area(x, y, horizon[key[:2]]))
        columns = [by_task[t] for t in sorted(by_task)]
        if len({len(c) for c in columns}) != 1:
            raise ValueError(f"{'/'.join(key)}: tasks have different numbers of runs")
        out[key] = np.array(columns, np.float64).T
    return out


def improvements(
    measurements: Sequence[Measurement],
    methods: Sequence[str],
    *,
    seed: int = 0,
    samples: int = 2000,
    confidence: float = 0.95,
) -> list[Improvement]:
    """Each of `methods` over each baseline measured beside it, per family and split."""
    aucs = run_aucs(measurements)
    out = []
    for family, split, method in aucs:
        if method not in methods:
            continue
        for baseline in BASELINES:
            other = aucs.get((family, split, baseline))
            if other is None:
                continue
            name = f"{family}/{split}/{method}/{baseline}"
            pair = {name: [aucs[family, split, method], other]}
            point, interval = _estimates(
                pair, zlib.crc32(f"{seed}/{name}".encode()), samples, confidence
            )
            low, high = (float(v) for v in np.ravel(interval[name]))
            out.append(Improvement(family, split, method, baseline, float(point[name]), low, high))
    return out


def _estimates(
    pair: dict[str, list[np.ndarray]], seed: int, samples: int, confidence: float
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """rliable's point and interval estimates of one pair's probability of improvement."""
    from rliable import library  # 2.5 s of imports (arch, scipy.stats): only when used

    # rliable's StratifiedIndependentBootstrap draws its indices from NumPy's global generator
    # (its random_state goes unused): seed that one for the call, and put it back
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        return library.get_interval_estimates(
            pair,
            probability_of_improvement,
            reps=samples,
            confidence_interval_size=confidence,
        )
    finally:
        np.random.set_state(saved)


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable's `metrics.probability_of_improvement` in one array operation, the same number.

    Per task, the Mann-Whitney U of X over Y (pairs with X greater, ties counting half) over
    the number of pairs; averaged over tasks. rliable calls scipy's test once per task and
    bootstrap replicate, which took most of a study's report.
    """
    x, y = scores_x[:, None, :], scores_y[None, :, :]
    pairs = (x > y).sum((0, 1)) + 0.5 * (x == y).sum((0, 1))
    return float(np.mean(pairs / (len(scores_x) * len(scores_y))))
