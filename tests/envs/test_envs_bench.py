"""envs/bench.py: the throughput functions other benchmarks call, timed on a fake clock."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

import envs
from envs import bench
from envs.bench import step_time_us, throughput
from envs.tasks.core import BatchedTask

TICK = 2.0**-12  # fake seconds per task step: exact in binary, so the rates below are exact


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """envs.bench's clock, advanced TICK by every task step and a whole second by env creation."""
    clock = types.SimpleNamespace(now=0.0, steps=0)
    step, make = BatchedTask.step, envs.make

    def counted_step(core: BatchedTask[Any], action: np.ndarray) -> Any:
        clock.now += TICK
        clock.steps += 1
        return step(core, action)

    def slow_make(*args: Any, **kwargs: Any) -> Any:
        clock.now += 1.0  # must fall outside the timed window, or the rates below show it
        return make(*args, **kwargs)

    monkeypatch.setattr(BatchedTask, "step", counted_step)
    monkeypatch.setattr(envs, "make", slow_make)
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    return clock


@pytest.mark.parametrize(
    ("name", "areas", "steps"), [("CarryObject", 8, 50), ("FindTarget", 64, 30)]
)
def test_throughput_is_agent_steps_over_the_time_of_exactly_those_steps(
    clock: types.SimpleNamespace, name: str, areas: int, steps: int
) -> None:
    rate = throughput(name, areas, steps)
    assert clock.steps == steps
    assert rate == areas / TICK  # each area steps once per tick, and only steps are timed


def test_step_time_is_the_time_of_one_step(clock: types.SimpleNamespace) -> None:
    assert step_time_us("FindTarget", 40) == pytest.approx(TICK * 1e6, rel=1e-12)
    assert clock.steps == 40
