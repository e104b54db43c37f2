"""The search space: `hydra.sweeper.params` in Hydra's override grammar, as Optuna distributions.

As Hydra's Optuna sweeper read it: `choice(a, b)` (or `a,b`) is categorical; `interval(lo, hi)`
uniform over floats, `int(interval(lo, hi))` over integers, `tag(log, ...)` on a log scale;
`range(lo, hi, step)` Optuna's stepped interval with `hi` included (`shuffle(range(...))`: a
choice of the range's values, in order); a plain value is fixed for every trial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    RangeSweep,
    Transformer,
)
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from meta.errors import first_line


@dataclass(frozen=True)
class SearchSpace:
    """What a trial samples (`distributions`) and what every trial is given (`fixed`)."""

    distributions: dict[str, BaseDistribution]
    fixed: dict[str, str]
    """Key to its value as an override writes it."""

    def corners(self) -> list[list[str]]:
        """Overrides that between them give every key each of its extreme values (every choice,
        each end of an interval), so that composing them checks each key and value once."""
        values = {key: _extremes(d) for key, d in self.distributions.items()}
        rows = max((len(v) for v in values.values()), default=1)
        fixed = [f"{key}={value}" for key, value in self.fixed.items()]
        return [
            [*fixed, *(f"{key}={v[row % len(v)]}" for key, v in values.items())]
            for row in range(rows)
        ]

    def grid(self) -> dict[str, list[Any]]:
        """Every key's values, for Optuna's GridSampler; ValueError for a continuous interval."""
        grid: dict[str, list[Any]] = {}
        for key, distribution in self.distributions.items():
            if isinstance(distribution, CategoricalDistribution):
                grid[key] = list(distribution.choices)
            elif isinstance(distribution, FloatDistribution | IntDistribution) and (
                distribution.step is not None and not distribution.log
            ):
                count = round((distribution.high - distribution.low) / distribution.step) + 1
                grid[key] = [distribution.low + i * distribution.step for i in range(count)]
            else:
                raise ValueError(
                    f"hydra.sweeper.params.{key}: the grid sampler takes choices and ranges, "
                    "not a continuous interval"
                )
        return grid

    def size(self) -> int:
        """How many settings the grid has."""
        return math.prod(len(values) for values in self.grid().values())


def search_space(entries: Sequence[tuple[str, str]]) -> SearchSpace:
    """The space of `(where, override)` entries (later ones win); ValueError names the entry."""
    parser = OverridesParser.create()
    distributions: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for where, entry in entries:
        try:
            override = parser.parse_override(entry)
            key = override.get_key_element()
            value = _distribution(override)
        except Exception as error:  # Hydra's grammar errors and ours: the entry is wrong
            raise ValueError(f"{where}: {entry}: {first_line(error)}") from None
        distributions.pop(key, None)
        fixed.pop(key, None)
        if isinstance(value, BaseDistribution):
            distributions[key] = value
        else:
            fixed[key] = value
    return SearchSpace(distributions, fixed)


def _distribution(override: Override) -> BaseDistribution | str:
    """The override's distribution, or its value as written for a plain value."""
    if not override.is_sweep_override():
        return override.get_value_element_as_str()
    sweep = override.value()
    if isinstance(sweep, ChoiceSweep) or (isinstance(sweep, RangeSweep) and sweep.shuffle):
        choices = list(override.sweep_iterator(transformer=Transformer.encode))
        if isinstance(sweep, RangeSweep):  # a sampler's choices in order, whatever the shuffle
            choices.sort()
        if not choices:
            raise ValueError("a choice with no options")
        return CategoricalDistribution(choices)  # type: ignore[arg-type]  # lists come as strings
    if isinstance(sweep, RangeSweep):
        low, high, step = sweep.start, sweep.stop, sweep.step
        _ordered(low, high, "range")
        if any(isinstance(v, float) for v in (low, high, step)):
            return FloatDistribution(float(low), float(high), step=float(step))  # type: ignore[arg-type]
        return IntDistribution(int(low), int(high), step=int(step))  # type: ignore[arg-type]
    if isinstance(sweep, IntervalSweep):
        low, high, log = sweep.start, sweep.end, "log" in sweep.tags
        _ordered(low, high, "interval")
        if isinstance(low, int) and isinstance(high, int):
            return IntDistribution(low, high, log=log)
        return FloatDistribution(float(low), float(high), log=log)  # type: ignore[arg-type]
    raise ValueError(f"{type(sweep).__name__} is not a search space (choice, range, interval)")


def _ordered(low: object, high: object, kind: str) -> None:
    """ValueError for bounds that are missing or in the wrong order."""
    if low is None or high is None:
        raise ValueError(f"an {kind} needs both its bounds")
    if low > high:  # type: ignore[operator]
        raise ValueError(f"the {kind}'s low {low} is above its high {high}")


def _extremes(distribution: BaseDistribution) -> list[Any]:
    """A distribution's choices, or its two ends."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    assert isinstance(distribution, FloatDistribution | IntDistribution)
    return [distribution.low, distribution.high]
