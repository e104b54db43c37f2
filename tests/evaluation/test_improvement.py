"""Success AUC beside steps-to-80, and rliable's probability of improvement over baselines."""

from __future__ import annotations

import numpy as np
import pytest
from rliable import metrics

from meta.evaluation.improvement import improvements, probability_of_improvement, run_aucs
from meta.evaluation.statistics import Measurement
from meta.evaluation.steps import steps_to_target


def curve(method: str, task: int, seed: int, successes: list[float]) -> list[Measurement]:
    """One adaptation's measurements after budgets 0, 1, 2 of 128 env steps each."""
    return [
        Measurement(method, "FindTarget", "test", task, seed, b, b * 128, 0.0, s, 4, "{}")
        for b, s in enumerate(successes)
    ]


def test_steps_to_80_rows_carry_the_success_auc_over_env_steps_with_hand_values() -> None:
    rows = [m for seed in range(3) for m in curve("fast", 0, seed, [0.0, 1.0, 1.0])]
    rows += [m for seed in range(3) for m in curve("slow", 0, seed, [0.0, 0.0, 1.0])]
    by_method = {s.method: s for s in steps_to_target(rows, seed=0, samples=50)}
    # trapezoids over [0, 256]: (0 + 1)/2 * 128 + 1 * 128 = 192 -> 0.75; (0 + 0) + 1/2 * 128 -> 0.25
    assert by_method["fast"].auc == pytest.approx(0.75)
    assert by_method["slow"].auc == pytest.approx(0.25)
    assert (by_method["fast"].auc_low, by_method["fast"].auc_high) == pytest.approx((0.75, 0.75))
    assert by_method["fast"].steps_to_80 == 128.0  # the old column, unchanged


def test_probability_of_improvement_is_rliables_on_the_runs_aucs() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for task in range(3):
        for seed in range(4):
            rows += curve("reptile", task, seed, [0.0, *rng.uniform(0.3, 1.0, 2)])
            rows += curve("scratch", task, seed, [0.0, *rng.uniform(0.0, 0.7, 2)])
    aucs = run_aucs(rows)
    assert aucs["FindTarget", "test", "reptile"].shape == (4, 3)  # runs x tasks
    (row,) = improvements(rows, ["reptile"], seed=0, samples=200)
    assert (row.method, row.baseline, row.split) == ("reptile", "scratch", "test")
    expected = metrics.probability_of_improvement(
        aucs["FindTarget", "test", "reptile"], aucs["FindTarget", "test", "scratch"]
    )
    assert row.probability == pytest.approx(expected)
    assert row.probability > 0.5 and row.ci_low <= row.probability <= row.ci_high
    assert row.ci_low < row.ci_high
    assert improvements(rows, ["reptile"], seed=0, samples=200) == [row]  # seeded


def test_a_start_never_better_than_its_baseline_has_probability_zero() -> None:
    rows = []
    for seed in range(3):
        rows += curve("reptile", 0, seed, [0.0, 0.0, 0.0])
        rows += curve("joint", 0, seed, [0.0, 1.0, 1.0])
    (row,) = improvements(rows, ["reptile"], samples=100)
    assert (row.baseline, row.probability, row.ci_high) == ("joint", 0.0, 0.0)


def test_probability_of_improvement_is_rliables_number_to_the_bit() -> None:
    # ties (AUCs rounded to 0, 1 or 2 decimals), equal columns, and unequal numbers of runs
    rng = np.random.default_rng(0)
    for case in range(400):
        runs_x, runs_y, tasks = rng.integers(1, 9, 3)
        x = np.round(rng.random((runs_x, tasks)), case % 3)
        y = x.copy() if case % 5 == 0 else np.round(rng.random((runs_y, tasks)), case % 3)
        assert probability_of_improvement(x, y) == metrics.probability_of_improvement(x, y)
    same = rng.random((4, 3))
    assert probability_of_improvement(same, same) == 0.5
