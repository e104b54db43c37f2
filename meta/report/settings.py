"""A sweep's settings: runs grouped by the configuration keys in which they differ, seeds pooled.

A setting is every key of the configuration in force that changes training: `seed` is pooled,
and the control keys and those a resume may change (where the run writes, how it logs, where it
runs, meta-eval's options) are left out, except `meta.steps`. So runs of different algorithms or
task distributions are always different settings, never pooled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from meta.evaluation.statistics import bootstrap_ci, iqm
from meta.report.runs import Run
from meta.run.configuration import CONTROL_KEYS, changeable

POOLED = ("seed",)
IGNORED = ("optimized_metric",)
"""Not part of a setting: the search's metric names what a trial returns, not how it trains."""


@dataclass(frozen=True)
class Estimate:
    """IQM over seeds with its 95% bootstrap interval; `n` the seeds with a finite value."""

    iqm: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 3) -> str:
        """`0.812 [0.700, 0.900]`, or a phrase when there is nothing to pool."""
        if self.n == 0:
            return "no episode ended"
        if self.n == 1:
            return f"{self.iqm:.{digits}f}"
        return f"{self.iqm:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


@dataclass
class Setting:
    """Runs that differ only in their seeds."""

    label: str
    """`key=value` of each key in which the sweep's settings differ (`all runs` if none)."""
    values: dict[str, object]
    runs: list[Run] = field(default_factory=list)

    @property
    def algorithm(self) -> str:
        """The runs' meta.algorithm."""
        return str(self.runs[0].config.get("meta.algorithm", "reptile"))


def identity(run: Run) -> dict[str, object]:
    """The keys that make a run's setting (module docstring)."""
    return {
        key: value
        for key, value in run.config.items()
        if key.split(".")[0] not in (*CONTROL_KEYS, *POOLED, *IGNORED)
        and (key == "meta.steps" or not changeable(key))
    }


def group(runs: Sequence[Run]) -> tuple[list[Setting], list[str]]:
    """Settings in the order their first runs come, and the keys in which they differ."""
    identities = [identity(r) for r in runs]
    keys = sorted({k for i in identities for k in i})
    differing = [k for k in keys if len({_hashable(i.get(k)) for i in identities}) > 1]
    settings: dict[tuple[object, ...], Setting] = {}
    for run, ident in zip(runs, identities, strict=True):
        values = {k: ident.get(k) for k in differing}
        key = tuple(_hashable(ident.get(k)) for k in keys)
        label = " ".join(f"{k}={_short(v)}" for k, v in values.items()) or "all runs"
        settings.setdefault(key, Setting(label, values)).runs.append(run)
    for setting in settings.values():
        setting.runs.sort(key=lambda r: r.seed)
    return list(settings.values()), differing


def _hashable(value: object) -> object:
    return repr(value)


def _short(value: object) -> str:
    """A value as a compact token (lists and dicts without spaces)."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).replace(" ", "")


def pooled(values: Sequence[float], samples: int = 2000, seed: int = 0) -> Estimate:
    """IQM over seeds and its 95% interval (bootstrap over seeds); NaN values left out."""
    finite = np.array([v for v in values if math.isfinite(v)], np.float64)
    if finite.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    low, high = bootstrap_ci(finite[None, :], np.random.default_rng(seed), samples)
    return Estimate(float(iqm(finite)), low, high, int(finite.size))


def final(run: Run, column: str, last: int) -> float:
    """Mean of `column` over the run's last `last` meta-steps read (NaN steps left out)."""
    values = run.steps[column][-last:]
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan
