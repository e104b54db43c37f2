"""ML-Agents environment-parameter samplers: constant, uniform, gaussian, multirangeuniform."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

UNSEEDED = -1
"""ML-Agents' `seed` default: the sampler draws from the run's generator."""


@dataclass(frozen=True)
class ConstantSampler:
    """A fixed value: a plain number in the YAML, or `sampler_type: constant`."""

    value: float = 0.0
    seed: int = UNSEEDED

    def draw(self, rng: np.random.Generator) -> float:
        """Return the constant; `rng` is not used."""
        return self.value


@dataclass(frozen=True)
class UniformSampler:
    """Uniform on [min_value, max_value]."""

    min_value: float = 0.0
    max_value: float = 1.0
    seed: int = UNSEEDED

    def draw(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        return float(rng.uniform(self.min_value, self.max_value))


@dataclass(frozen=True)
class GaussianSampler:
    """Normal with mean `mean` and standard deviation `st_dev`."""

    mean: float = 1.0
    st_dev: float = 1.0
    seed: int = UNSEEDED

    def draw(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        return float(rng.normal(self.mean, self.st_dev))


@dataclass(frozen=True)
class MultiRangeUniformSampler:
    """Pick an interval with probability proportional to its length, then uniform in it."""

    intervals: tuple[tuple[float, float], ...] = ((0.0, 1.0),)
    seed: int = UNSEEDED

    def draw(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        low, high = self.intervals[self._pick(rng)]
        return float(rng.uniform(low, high))

    def _pick(self, rng: np.random.Generator) -> int:
        ends = np.cumsum([high - low for low, high in self.intervals])
        total = float(ends[-1])
        if total <= 0.0:
            # Only single points: ML-Agents divides by zero here; take each point equally often.
            return int(rng.integers(len(self.intervals)))
        index = int(np.searchsorted(ends, rng.random() * total, side="right"))
        return min(index, len(self.intervals) - 1)


Sampler = ConstantSampler | UniformSampler | GaussianSampler | MultiRangeUniformSampler


def parse_sampler(raw: Any, where: str) -> Sampler:
    """Parse a lesson value: a number (constant) or `{sampler_type, sampler_parameters}`."""
    if _is_number(raw):
        return ConstantSampler(value=to_float(raw, where))
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"{where}: expected a number or a mapping with sampler_type and sampler_parameters,"
            f" got {raw!r}"
        )
    check_keys(raw, {"sampler_type", "sampler_parameters"}, where)
    for key in ("sampler_type", "sampler_parameters"):
        if key not in raw:
            raise ValueError(f"{where}: missing {key}")
    kind = raw["sampler_type"]
    if kind not in _PARSERS:
        raise ValueError(
            f"{where}.sampler_type: unknown {kind!r} (expected one of {list(_PARSERS)})"
        )
    params = {} if raw["sampler_parameters"] is None else raw["sampler_parameters"]
    where = f"{where}.sampler_parameters"
    if not isinstance(params, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {params!r}")
    return _PARSERS[kind](params, where)


def _parse_constant(params: Mapping[str, Any], where: str) -> ConstantSampler:
    check_keys(params, {"value", "seed"}, where)
    return ConstantSampler(
        value=to_float(params.get("value", 0.0), f"{where}.value"), seed=_seed(params, where)
    )


def _parse_uniform(params: Mapping[str, Any], where: str) -> UniformSampler:
    check_keys(params, {"min_value", "max_value", "seed"}, where)
    low = to_float(params.get("min_value", 0.0), f"{where}.min_value")
    high = to_float(params.get("max_value", 1.0), f"{where}.max_value")
    if low > high:
        raise ValueError(f"{where}: min_value {low} is greater than max_value {high}")
    return UniformSampler(min_value=low, max_value=high, seed=_seed(params, where))


def _parse_gaussian(params: Mapping[str, Any], where: str) -> GaussianSampler:
    check_keys(params, {"mean", "st_dev", "seed"}, where)
    mean = to_float(params.get("mean", 1.0), f"{where}.mean")
    st_dev = to_float(params.get("st_dev", 1.0), f"{where}.st_dev")
    if st_dev < 0.0:
        raise ValueError(f"{where}.st_dev: must be >= 0, got {st_dev}")
    return GaussianSampler(mean=mean, st_dev=st_dev, seed=_seed(params, where))


def _parse_multirange(params: Mapping[str, Any], where: str) -> MultiRangeUniformSampler:
    check_keys(params, {"intervals", "seed"}, where)
    raw = params.get("intervals", [[0.0, 1.0]])
    if isinstance(raw, str | bytes) or not hasattr(raw, "__len__") or len(raw) == 0:
        raise ValueError(f"{where}.intervals: expected a non-empty list of [min, max], got {raw!r}")
    intervals = tuple(_interval(item, f"{where}.intervals[{i}]") for i, item in enumerate(raw))
    return MultiRangeUniformSampler(intervals=intervals, seed=_seed(params, where))


def _interval(raw: Any, where: str) -> tuple[float, float]:
    if isinstance(raw, str | bytes | Mapping) or not hasattr(raw, "__len__") or len(raw) != 2:
        raise ValueError(f"{where}: an interval must be [min, max], got {raw!r}")
    low, high = to_float(raw[0], f"{where}[0]"), to_float(raw[1], f"{where}[1]")
    if low > high:
        raise ValueError(f"{where}: min {low} is greater than max {high}")
    return low, high


_PARSERS: dict[str, Callable[[Mapping[str, Any], str], Sampler]] = {
    "constant": _parse_constant,
    "uniform": _parse_uniform,
    "gaussian": _parse_gaussian,
    "multirangeuniform": _parse_multirange,
}


def _seed(params: Mapping[str, Any], where: str) -> int:
    seed = to_int(params.get("seed", UNSEEDED), f"{where}.seed")
    if seed < UNSEEDED:
        raise ValueError(f"{where}.seed: must be >= 0 (or -1 for the run's generator), got {seed}")
    return seed


def check_keys(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    """Raise ValueError naming the first key of `raw` not in `allowed`."""
    for key in raw:
        if key not in allowed:
            raise ValueError(f"{where}: unknown key {key!r} (expected some of {sorted(allowed)})")


def _is_number(raw: Any) -> bool:
    return isinstance(raw, int | float | np.integer | np.floating) and not isinstance(raw, bool)


def to_float(raw: Any, where: str) -> float:
    """A finite float from a number, or from a string such as YAML 1.1's unparsed `1e-3`."""
    try:
        value = float(raw) if _is_number(raw) or isinstance(raw, str) else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {raw!r}")
    return value


def to_int(raw: Any, where: str) -> int:
    """An int from an integer or an integral float."""
    if _is_number(raw) and float(raw).is_integer():
        return int(raw)
    raise ValueError(f"{where}: expected an integer, got {raw!r}")
