"""Task parameters (validated, with defaults) and families with their meta-train/test ranges."""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from envs.constants import SPLITS

if TYPE_CHECKING:
    import numpy as np

Interval = tuple[float, float]
Ranges = Mapping[str, tuple[Interval, ...]]


def param(default: float, low: float, high: float, doc: str, *, integer: bool = False) -> Any:
    """A parameter field: default, valid closed range [low, high], one-line meaning."""
    meta = {"low": low, "high": high, "integer": integer, "doc": doc}
    return field(default=float(default), metadata=meta)


@dataclass(frozen=True)
class TaskParams:
    """Environment parameters every task reads (names as a Unity build reads them)."""

    arena_size: float = param(10.0, 2.0, 1000.0, "side of the square arena")
    agent_speed: float = param(0.2, 0.01, 100.0, "distance moved per step at full command")
    target_radius: float = param(1.0, 0.05, 250.0, "reach radius of the target or object")
    max_step: float = param(
        100, 1, 1_000_000, "steps before an episode is interrupted", integer=True
    )
    shaping: float = param(1.0, 0.0, 100.0, "weight of the potential-based distance shaping")
    motor_rotation: float = param(
        0.0, -180.0, 180.0, "hidden rotation of the move command, degrees"
    )
    hidden_velocity: float = param(
        0,
        0,
        1,
        "1: the velocity is unobserved (the last move does not show the rotation)",
        integer=True,
    )

    def check(self) -> None:
        """Raise ValueError when parameters contradict each other."""
        if self.target_radius > self.arena_size / 4:
            raise ValueError(
                f"target_radius={self.target_radius:g} exceeds arena_size/4 "
                f"({self.arena_size / 4:g})"
            )

    def as_dict(self) -> dict[str, float]:
        """The parameter values by name."""
        return dataclasses.asdict(self)


P = TypeVar("P", bound=TaskParams)


def _checked(task: str, name: str, raw: object, meta: Mapping[str, Any]) -> float:
    """One parameter value as a float, or a one-line ValueError naming it."""
    if isinstance(raw, bool) or not isinstance(raw, numbers.Real):
        raise ValueError(f"{task} parameter {name} must be a number, got {raw!r}")
    value = float(raw)
    low, high = meta["low"], meta["high"]
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{task} parameter {name}={value:g} is outside [{low:g}, {high:g}]")
    if meta["integer"] and value != int(value):
        raise ValueError(f"{task} parameter {name}={value:g} must be a whole number")
    return value


def build_params(task: str, cls: type[P], values: Mapping[str, object], base: P | None = None) -> P:
    """`base` (or the defaults) updated with `values`, each checked; ValueError on bad input."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    merged: dict[str, float] = base.as_dict() if base is not None else {}
    for name, raw in values.items():
        if name not in fields:
            raise ValueError(f"unknown {task} parameter {name!r} (known: {', '.join(fields)})")
        merged[name] = _checked(task, name, raw, fields[name].metadata)
    params = cls(**merged)
    params.check()
    return params


def _overlaps(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> bool:
    return any(lo1 < hi2 and lo2 < hi1 for lo1, hi1 in a for lo2, hi2 in b)


class Core(Protocol):
    """What every family's batched core offers the environment around it: its parameters."""

    @property
    def params(self) -> TaskParams:
        """The parameters that the next episodes use."""
        ...

    def set_params(self, params: Any) -> None:
        """Use `params` (the family's own TaskParams) from each area's next episode on."""
        ...


@dataclass(frozen=True, eq=False)
class Family:
    """A task family: its parameters, its batched core, and its meta-train/test ranges."""

    name: str
    params_type: type[TaskParams]
    core_type: Callable[..., Core]
    """The batched core: called with (params, num_areas, seed, record)."""
    train_ranges: Ranges
    test_ranges: Ranges
    teams: int = 1
    """1: one behavior, `Brain`; 2: an adversarial game of teams `Brain?team=0` and `=1`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "train_ranges", MappingProxyType(dict(self.train_ranges)))
        object.__setattr__(self, "test_ranges", MappingProxyType(dict(self.test_ranges)))
        if set(self.train_ranges) != set(self.test_ranges):
            raise ValueError(f"{self.name}: train and test ranges name different parameters")
        fields = {f.name: f.metadata for f in dataclasses.fields(self.params_type)}
        for name, train in self.train_ranges.items():
            test = self.test_ranges[name]
            if _overlaps(train, test):
                raise ValueError(f"{self.name}: test range of {name} overlaps its train range")
            for low, high in train + test:
                if not fields[name]["low"] <= low < high <= fields[name]["high"]:
                    raise ValueError(f"{self.name}: range ({low}, {high}) of {name} is invalid")

    @property
    def adversarial(self) -> bool:
        """Whether the task is a game between teams (trained by the ghost trainer)."""
        return self.teams > 1

    @property
    def param_names(self) -> tuple[str, ...]:
        """Names of every parameter the family reads."""
        return tuple(f.name for f in dataclasses.fields(self.params_type))

    def validate(self, values: Mapping[str, object], base: TaskParams | None = None) -> TaskParams:
        """Parameters from `base` (or defaults) updated with `values`; ValueError if invalid."""
        return build_params(self.name, self.params_type, values, base)

    def ranges(self, split: str = "train") -> Ranges:
        """The meta-train or held-out meta-test ranges (unions of [low, high) intervals)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
        return self.train_ranges if split == "train" else self.test_ranges

    def patches(self, split: str = "train", fixed: Iterable[str] = ()) -> list[dict[str, int]]:
        """Every combination of one interval per parameter ranged over several (those not in
        `fixed`): the split's patches, as interval indices, in a fixed order."""
        fixed = set(fixed)
        several = {
            name: len(intervals)
            for name, intervals in self.ranges(split).items()
            if len(intervals) > 1 and name not in fixed
        }
        combos = itertools.product(*(range(n) for n in several.values()))
        return [dict(zip(several, combo, strict=True)) for combo in combos]

    def sample_params(
        self, rng: np.random.Generator, split: str = "train", patch: Mapping[str, int] | None = None
    ) -> dict[str, float]:
        """One task: each ranged parameter uniform over its split's intervals, or over the one
        interval `patch` names for it."""
        out: dict[str, float] = {}
        for name, intervals in self.ranges(split).items():
            if patch and name in patch:
                intervals = (intervals[patch[name]],)
            u = float(rng.random()) * sum(high - low for low, high in intervals)
            for low, high in intervals:
                if u < high - low:
                    break
                u -= high - low
            out[name] = min(low + u, math.nextafter(high, low))
        return out


# Hidden dynamics every family shares: the move command's rotation and the agent's speed.
SHARED_TRAIN_RANGES: Ranges = {"motor_rotation": ((-60.0, 60.0),), "agent_speed": ((0.15, 0.25),)}
SHARED_TEST_RANGES: Ranges = {
    "motor_rotation": ((-120.0, -60.0), (60.0, 120.0)),
    "agent_speed": ((0.1, 0.15), (0.25, 0.3)),
}
