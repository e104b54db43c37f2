"""envs/bench.py: the throughput functions other benchmarks call (figures: python -m envs.bench)."""

from __future__ import annotations

from envs.bench import step_time_us, throughput


def test_throughput_and_step_time_are_positive_numbers() -> None:
    assert throughput("CarryObject", 8, 50) > 0.0
    assert 0.0 < step_time_us("FindTarget", 50) < 1e6
