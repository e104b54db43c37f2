"""envs/bench_unity.py without a build: the rate of a native task, the best of runs, the
build's figures read from its log, the resident memory of a process, the options refused.

The rates through a build are measured by meta-bench's tests (tests/bench/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import envs
from envs import bench_unity


def test_a_native_task_steps_at_a_positive_rate() -> None:
    assert bench_unity.rate(envs.make("FindTarget", num_areas=2), steps=5, warmup=2) > 0
    value, notes = bench_unity.native_rate("FindTarget", 1, 5)
    assert value > 0 and notes == ""


def test_the_best_of_runs_is_the_fastest_with_its_notes() -> None:
    runs = iter([(2.0, "second"), (3.0, "fastest"), (1.0, "slowest")])
    assert bench_unity.best(3, lambda: next(runs)) == (3.0, "fastest")


def test_the_builds_phases_come_from_its_last_timing_line(tmp_path: Path) -> None:
    (tmp_path / "Player-0.log").write_text(
        "time per step: read 1 us, task 1 us, encode 1 us, exchange 1 us\n"
        "time per step: read 10 us, task 30 us, encode 10 us, exchange 450 us\n"
    )
    figures = bench_unity.build_figures(4, 1_000.0, tmp_path)
    assert figures["build_us"] == {"read": 10.0, "task": 30.0, "encode": 10.0, "exchange": 450.0}
    assert figures["build_own_us"] == 50.0  # every phase but waiting on the trainer
    assert figures["without_build"] == pytest.approx(4 / (4 / 1_000 - 50e-6))


def test_the_resident_memory_of_this_process_is_read_in_mb() -> None:
    assert 1 < bench_unity.rss_mb(os.getpid()) < 1e6


def test_a_family_of_two_behaviors_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        bench_unity.main(["--family", "Sumo"])
    assert stop.value.code == 2 and "invalid choice: 'Sumo'" in capsys.readouterr().err
