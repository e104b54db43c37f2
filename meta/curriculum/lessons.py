"""Environment parameters as ML-Agents' `environment_parameters`: lessons and completion criteria.

In meta-training, `progress` is the fraction of meta-steps done and a reward data point is the
mean reward of one inner training; lessons advance between meta-steps.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from meta.curriculum.samplers import UNSEEDED, check_keys
from meta.curriculum.settings import (
    ParameterSettings,
    parse_settings,
)

log = logging.getLogger(__name__)


def parse_environment_parameters(
    raw: Mapping[str, Any] | None, behaviors: Sequence[str]
) -> EnvironmentParameters:
    """Parse an ML-Agents `environment_parameters` mapping; ValueError names the bad field."""
    return EnvironmentParameters(parse_settings(raw, behaviors), behaviors)


class EnvironmentParameters:
    """Current lessons, smoothed rewards, reward buffers and seeded samplers' generators."""

    def __init__(self, settings: Mapping[str, ParameterSettings], behaviors: Sequence[str]):
        self._settings = dict(settings)
        self._lesson = dict.fromkeys(self._settings, 0)
        self._smoothed = dict.fromkeys(self._settings, 0.0)
        self._buffers: dict[str, deque[float]] = {
            b: deque(maxlen=self._buffer_size(b)) for b in behaviors
        }
        self._generators = {
            _generator_key(name, i): np.random.default_rng(lesson.value.seed)
            for name, ps in self._settings.items()
            for i, lesson in enumerate(ps.lessons)
            if lesson.value.seed != UNSEEDED
        }

    @property
    def settings(self) -> Mapping[str, ParameterSettings]:
        """The parsed settings, by parameter name."""
        return MappingProxyType(self._settings)

    def _buffer_size(self, behavior: str) -> int:
        """Recent data points kept per behavior: the largest min_lesson_length naming it, >= 1."""
        lengths = [
            lesson.completion_criteria.min_lesson_length
            for ps in self._settings.values()
            for lesson in ps.lessons
            if lesson.completion_criteria is not None
            and lesson.completion_criteria.behavior == behavior
        ]
        return max([1, *lengths])

    def sample(self, rng: np.random.Generator) -> dict[str, float]:
        """One value per parameter from its current lesson (seeded samplers use their own)."""
        values: dict[str, float] = {}
        for name, ps in self._settings.items():
            index = self._lesson[name]
            gen = self._generators.get(_generator_key(name, index), rng)
            values[name] = ps.lessons[index].value.draw(gen)
        return values

    def update(self, progress: float, rewards: Mapping[str, Sequence[float]]) -> dict[str, int]:
        """Record new reward data points, advance lessons whose criteria hold; return those."""
        self._check_behaviors(rewards, "rewards")
        for behavior, values in rewards.items():
            self._buffers[behavior].extend(float(v) for v in values)
        changed: dict[str, int] = {}
        for name, ps in self._settings.items():
            index = self._lesson[name]
            criteria = ps.lessons[index].completion_criteria
            if criteria is None or index + 1 >= len(ps.lessons):
                continue
            advance, self._smoothed[name] = criteria.need_increment(
                progress, list(self._buffers[criteria.behavior]), self._smoothed[name]
            )
            if advance:
                self._lesson[name] = changed[name] = index + 1
        if changed:
            # ML-Agents clears every behavior's reward buffer when any lesson changes.
            for buffer in self._buffers.values():
                buffer.clear()
        return changed

    def announce(self, changes: Mapping[str, int], k: int, drawn: Mapping[str, float]) -> None:
        """Log each lesson change with the new lesson's value and the values meta-step k drew."""
        for name, lesson in changes.items():
            new = self._settings[name].lessons[lesson]
            log.info(
                "Parameter %s moved to lesson %d (%s, value %s) after meta-step %d; "
                "this meta-step drew %s",
                name,
                lesson,
                new.name,
                new.value,
                k,
                ", ".join(f"{n}={v:g}" for n, v in drawn.items()),
            )

    def lesson_nums(self) -> dict[str, int]:
        """Current lesson index per parameter (0 for constants and samplers)."""
        return dict(self._lesson)

    def lesson_names(self) -> dict[str, str]:
        """Current lesson name per parameter (the parameter's name outside a curriculum)."""
        return {name: ps.lessons[self._lesson[name]].name for name, ps in self._settings.items()}

    def set_lesson_nums(self, lesson_nums: Mapping[str, int]) -> None:
        """Set the lessons of the named parameters (resume from training_status.json)."""
        self._check_parameters(lesson_nums, "lesson_nums")
        for name, index in lesson_nums.items():
            count = len(self._settings[name].lessons)
            integer = isinstance(index, int | np.integer) and not isinstance(index, bool)
            if not (integer and 0 <= index < count):
                raise ValueError(
                    f"lesson_nums.{name}: expected a lesson index in [0, {count}), got {index!r}"
                )
        self._lesson.update({name: int(index) for name, index in lesson_nums.items()})

    def state_dict(self) -> dict[str, Any]:
        """Everything for an exact resume, as plain dicts, lists, ints, floats and strings."""
        return {
            "lesson_nums": self.lesson_nums(),
            "smoothed_values": dict(self._smoothed),
            "reward_buffers": {b: list(buffer) for b, buffer in self._buffers.items()},
            "generators": {key: gen.bit_generator.state for key, gen in self._generators.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what state_dict returned (same settings); absent parts stay as they are."""
        check_keys(
            state, {"lesson_nums", "smoothed_values", "reward_buffers", "generators"}, "state"
        )
        smoothed = state.get("smoothed_values", {})
        buffers = state.get("reward_buffers", {})
        generators = state.get("generators", {})
        self._check_parameters(smoothed, "state.smoothed_values")
        self._check_behaviors(buffers, "state.reward_buffers")
        for key in generators:
            if key not in self._generators:
                raise ValueError(f"state.generators: no seeded sampler {key!r} in these settings")
        self.set_lesson_nums(state.get("lesson_nums", {}))
        self._smoothed.update({name: float(value) for name, value in smoothed.items()})
        for behavior, values in buffers.items():
            self._buffers[behavior].clear()
            self._buffers[behavior].extend(float(v) for v in values)
        for key, bit_state in generators.items():
            self._generators[key].bit_generator.state = bit_state

    def _check_parameters(self, names: Mapping[str, Any], where: str) -> None:
        for name in names:
            if name not in self._settings:
                raise ValueError(f"{where}: unknown environment parameter {name!r}")

    def _check_behaviors(self, names: Mapping[str, Any], where: str) -> None:
        for name in names:
            if name not in self._buffers:
                raise ValueError(
                    f"{where}: unknown behavior {name!r} (expected {list(self._buffers)})"
                )


def _generator_key(name: str, lesson_index: int) -> str:
    return f"{name}/{lesson_index}"
