"""ML-Agents' `environment_parameters` section parsed into settings: lessons and criteria."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from meta.curriculum.samplers import Sampler, check_keys, parse_sampler, to_float, to_int

MEASURES = ("progress", "reward")
SMOOTHING_KEEP = 0.25
"""ML-Agents' smoothing: new = 0.25 * previous + 0.75 * mean reward."""


@dataclass(frozen=True)
class CompletionCriteria:
    """When a lesson is complete (ML-Agents' `completion_criteria`)."""

    behavior: str
    measure: str = "reward"
    threshold: float = 0.0
    min_lesson_length: int = 0
    signal_smoothing: bool = True
    require_reset: bool = False

    def need_increment(
        self, progress: float, rewards: Sequence[float], smoothed: float
    ) -> tuple[bool, float]:
        """Whether to move to the next lesson, and the new smoothed reward (strict `>`)."""
        if len(rewards) < self.min_lesson_length:
            return False, smoothed
        if self.measure == "progress":
            return progress > self.threshold, smoothed
        if not rewards:
            return False, smoothed
        measure = float(np.mean(rewards))
        if math.isnan(measure):
            return False, smoothed
        if self.signal_smoothing:
            measure = SMOOTHING_KEEP * smoothed + (1.0 - SMOOTHING_KEEP) * measure
            smoothed = measure
        return measure > self.threshold, smoothed


@dataclass(frozen=True)
class Lesson:
    """One lesson: its name, the parameter's value, and when it ends (None for the last)."""

    name: str
    value: Sampler
    completion_criteria: CompletionCriteria | None = None


@dataclass(frozen=True)
class ParameterSettings:
    """The lessons of one environment parameter; a constant or sampler is a single lesson."""

    name: str
    lessons: tuple[Lesson, ...]


def parse_settings(
    raw: Mapping[str, Any] | None, behaviors: Sequence[str]
) -> dict[str, ParameterSettings]:
    """Parse an ML-Agents `environment_parameters` mapping; ValueError names the bad field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"environment_parameters: expected a mapping, got {raw!r}")
    settings: dict[str, ParameterSettings] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"environment_parameters: parameter names must be strings, got {name!r}"
            )
        settings[name] = _parse_parameter(name, value, behaviors)
    return settings


def _parse_parameter(name: str, raw: Any, behaviors: Sequence[str]) -> ParameterSettings:
    where = f"environment_parameters.{name}"
    if not (isinstance(raw, Mapping) and "curriculum" in raw):
        return ParameterSettings(name, (Lesson(name=name, value=parse_sampler(raw, where)),))
    check_keys(raw, {"curriculum"}, where)
    lessons_raw = raw["curriculum"]
    if isinstance(lessons_raw, str) or not isinstance(lessons_raw, Sequence) or not lessons_raw:
        raise ValueError(f"{where}.curriculum: expected a non-empty list of lessons")
    lessons = tuple(
        _parse_lesson(item, f"{where}.curriculum[{i}]", behaviors)
        for i, item in enumerate(lessons_raw)
    )
    for i, lesson in enumerate(lessons[:-1]):
        if lesson.completion_criteria is None:
            raise ValueError(
                f"{where}.curriculum[{i}] ({lesson.name!r}): a lesson other than the last"
                " needs completion_criteria"
            )
    if lessons[-1].completion_criteria is not None:
        warnings.warn(
            f"{where}: the last lesson's completion_criteria is ignored (as in ML-Agents)",
            stacklevel=3,
        )
    return ParameterSettings(name, lessons)


def _parse_lesson(raw: Any, where: str, behaviors: Sequence[str]) -> Lesson:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a lesson must be a mapping with name and value, got {raw!r}")
    check_keys(raw, {"name", "value", "completion_criteria"}, where)
    for key in ("name", "value"):
        if key not in raw:
            raise ValueError(f"{where}: lesson is missing {key}")
    name = raw["name"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name: expected a non-empty string, got {name!r}")
    where = f"{where} ({name!r})"
    criteria = raw.get("completion_criteria")
    return Lesson(
        name=name,
        value=parse_sampler(raw["value"], f"{where}.value"),
        completion_criteria=None
        if criteria is None
        else _parse_criteria(criteria, f"{where}.completion_criteria", behaviors),
    )


def _parse_criteria(raw: Any, where: str, behaviors: Sequence[str]) -> CompletionCriteria:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {raw!r}")
    check_keys(raw, {f.name for f in fields(CompletionCriteria)}, where)
    if "behavior" not in raw:
        raise ValueError(f"{where}: missing behavior")
    behavior = raw["behavior"]
    if not isinstance(behavior, str) or behavior not in behaviors:
        raise ValueError(
            f"{where}.behavior: {behavior!r} is not a behavior of this run {list(behaviors)}"
        )
    measure = raw.get("measure", "reward")
    if measure not in MEASURES:
        raise ValueError(
            f"{where}.measure: unknown measure {measure!r} (expected one of {list(MEASURES)})"
        )
    threshold = to_float(raw.get("threshold", 0.0), f"{where}.threshold")
    if measure == "progress" and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"{where}.threshold: {threshold} is never reached: progress is in [0, 1]")
    min_lesson_length = to_int(raw.get("min_lesson_length", 0), f"{where}.min_lesson_length")
    if min_lesson_length < 0:
        raise ValueError(f"{where}.min_lesson_length: must be >= 0, got {min_lesson_length}")
    return CompletionCriteria(
        behavior=behavior,
        measure=measure,
        threshold=threshold,
        min_lesson_length=min_lesson_length,
        signal_smoothing=_flag(raw, "signal_smoothing", True, where),
        require_reset=_flag(raw, "require_reset", False, where),
    )


def _flag(raw: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{where}.{key}: expected true or false, got {value!r}")
    return value
