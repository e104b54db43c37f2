"""meta/evaluation/statistics.py: IQM and stratified bootstrap against hand values and rliable."""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from meta.evaluation.statistics import Measurement, bootstrap_ci, iqm, steps_to_threshold, summarise
from meta.evaluation.steps import steps_to_target

# --- hand values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, 3, 4, 5, 6, 7, 8], 4.5),  # cut 2 each end: (3+4+5+6)/4
        ([10, 1, 2, 3, 100, 4, 5, -50], 3.5),  # outliers cut: (2+3+4+5)/4
        ([1, 2, 3, 4, 100], 3.0),  # cut floor(5/4) = 1 each end
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 4.5),  # cut 2: (2+...+7)/6
        ([7.0], 7.0),
    ],
)
def test_iqm_hand_values(values: list[float], expected: float) -> None:
    assert float(iqm(values)) == pytest.approx(expected)


def test_iqm_along_an_axis() -> None:
    rows = np.array([[1, 2, 3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3, 2, 1000]])
    assert iqm(rows, axis=1).tolist() == pytest.approx([4.5, 5.5])


def test_bootstrap_ci_contains_the_iqm_shrinks_with_data_and_is_seeded() -> None:
    data = np.random.default_rng(0).normal(size=(4, 400))
    small, large = data[:, :5], data
    low_s, high_s = bootstrap_ci(small, np.random.default_rng(1), 1000)
    low_l, high_l = bootstrap_ci(large, np.random.default_rng(1), 1000)
    assert low_s <= iqm(small.ravel()) <= high_s
    assert low_l <= iqm(large.ravel()) <= high_l
    assert high_l - low_l < (high_s - low_s) / 3
    assert bootstrap_ci(small, np.random.default_rng(1), 1000) == (low_s, high_s)


def test_bootstrap_is_stratified_by_task() -> None:
    # Each task gives the same value for every seed: resampling seeds within tasks cannot move
    # the IQM (a plain bootstrap over all 12 values would).
    per_task = np.repeat(np.array([[0.0], [1.0], [2.0], [3.0]]), 3, axis=1)
    low, high = bootstrap_ci(per_task, np.random.default_rng(0), 500)
    assert low == high == pytest.approx(1.5)


def test_steps_to_threshold() -> None:
    steps, success = [0, 100, 200, 500], [0.0, 0.3, 0.85, 0.9]
    assert steps_to_threshold(steps, success, 0.8) == 200
    assert steps_to_threshold(steps, success, 0.0) == 0
    assert math.isnan(steps_to_threshold(steps, success, 0.95))


def _measurements(method: str, curve: list[float], split: str = "test") -> list[Measurement]:
    return [
        Measurement(method, "FindTarget", split, task, seed, b, 100 * b, -1.0, v, 4, "{}")
        for b, v in zip([0, 1, 2, 5], curve, strict=True)
        for task in range(2)
        for seed in range(3)
    ]


def test_summary_cells_and_steps_to_an_absolute_success_target() -> None:
    rows = (
        _measurements("reptile", [0.1, 0.7, 0.9, 1.0])
        + _measurements("scratch", [0.0, 0.1, 0.3, 0.5])
        + _measurements("joint", [0.2, 0.8, 0.8, 0.8])
        + _measurements("reptile", [0.0, 0.0, 0.0, 0.0], "train")
    )
    cells = summarise(rows, samples=100)
    assert [(c.method, c.split) for c in cells if c.budget == 0] == [
        ("reptile", "test"),
        ("scratch", "test"),
        ("joint", "test"),
        ("reptile", "train"),
    ]
    reached = {(c.method, c.split): c.steps_to_80 for c in cells}
    # the target is 0.8 success, absolute: reptile at budget 2, joint at 1, scratch never
    assert reached["reptile", "test"] == 200
    assert reached["joint", "test"] == 100
    assert math.isnan(reached["scratch", "test"])
    assert math.isnan(reached["reptile", "train"])
    # the same figure as steps_to_80.csv's, for every curve
    steps = {(s.method, s.split): s.steps_to_80 for s in steps_to_target(rows, 0.8, samples=100)}
    assert steps.keys() == reached.keys()
    for key, value in reached.items():
        assert value == steps[key] or (math.isnan(value) and math.isnan(steps[key]))
    # a lower target is met earlier: the definition does not depend on the other methods
    lower = {(c.method, c.split): c.steps_to_80 for c in summarise(rows, samples=100, target=0.5)}
    assert (lower["reptile", "test"], lower["scratch", "test"]) == (100, 500)
    cell = next(c for c in cells if (c.method, c.budget) == ("scratch", 5))
    assert (cell.n, cell.env_steps, cell.success_iqm) == (6, 500, pytest.approx(0.5))
    assert cell.success_low == cell.success_high == pytest.approx(0.5)


# --- against rliable ---------------------------------------------------------------------------

TASKS, SEEDS = 4, 5  # meta-eval's defaults: eval.tasks_per_family, eval.seeds
REPLICATES = 10_000
MC_REPEATS = 30
Z = 5.0


@pytest.fixture(scope="module")
def rliable() -> tuple[Any, Any]:
    """rliable's library and metrics modules (a dev dependency: never skipped)."""
    return importlib.import_module("rliable.library"), importlib.import_module("rliable.metrics")


@pytest.fixture
def global_numpy_seed() -> Iterator[Callable[[int], None]]:
    """np.random.seed, with the global state restored afterwards.

    rliable's StratifiedBootstrap draws its indices with the global np.random.choice (its
    `random_state` argument does not reach them), so seeding rliable means seeding that.
    """
    state = np.random.get_state()
    yield np.random.seed
    np.random.set_state(state)


def rliable_iqm(rliable: tuple[Any, Any], by_task: np.ndarray, reps: int) -> tuple[float, ...]:
    """rliable's IQM and percentile interval of (tasks, seeds) scores: (point, low, high)."""
    library, metrics = rliable
    point, interval = library.get_interval_estimates(
        {"x": by_task.T},  # rliable's layout: (runs, tasks)
        lambda scores: np.array([metrics.aggregate_iqm(scores)]),
        reps=reps,
        confidence_interval_size=0.95,
    )
    return float(point["x"][0]), *(float(v) for v in interval["x"][:, 0])


def scores() -> tuple[np.ndarray, np.ndarray]:
    """(tasks, seeds) rewards and successes as meta-eval measures them: tasks differ a lot."""
    rng = np.random.default_rng(2024)
    reward = np.array([-0.6, -0.1, 0.3, 0.8])[:, None] + 0.25 * rng.standard_normal((TASKS, SEEDS))
    success = rng.binomial(64, np.array([0.1, 0.4, 0.6, 0.9])[:, None], (TASKS, SEEDS)) / 64
    return reward, success


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 11, 20, 33])
def test_iqm_is_rliables_trimmed_mean(rliable: tuple[Any, Any], n: int) -> None:
    values = np.random.default_rng(n).standard_normal(n) ** 3  # heavy tails: the cut matters
    grid = values.reshape(1, n)
    assert float(iqm(values)) == pytest.approx(rliable[1].aggregate_iqm(grid), rel=1e-12)


class _RliableDraws:
    """A stand-in for bootstrap_ci's generator that draws the indices rliable draws.

    rliable's StratifiedBootstrap takes, per replicate, np.random.choice(runs, (runs, tasks)):
    entry [j, t] is the run in slot j of task t. bootstrap_ci takes (samples, tasks, seeds)
    integers, entry [s, t, j] being the seed in slot j of task t: the same draw, transposed.
    """

    def integers(self, low: int, high: int, size: tuple[int, int, int]) -> np.ndarray:
        samples, tasks, seeds = size
        assert low == 0
        return np.stack([np.random.choice(high, (seeds, tasks)).T for _ in range(samples)])


@pytest.mark.parametrize("metric", ["reward", "success"])
def test_bootstrap_ci_given_rliables_draws_gives_rliables_interval(
    rliable: tuple[Any, Any], global_numpy_seed: Callable[[int], None], metric: str
) -> None:
    # Same resampled indices in, same interval out, to rounding: the two bootstraps stratify
    # alike (seeds within tasks), pool the resample alike, and take the same percentiles.
    by_task = dict(zip(("reward", "success"), scores(), strict=True))[metric]
    global_numpy_seed(7)
    _, low, high = rliable_iqm(rliable, by_task, 2000)
    global_numpy_seed(7)
    ours = bootstrap_ci(by_task, _RliableDraws(), 2000)  # type: ignore[arg-type]
    assert ours == pytest.approx((low, high), rel=1e-12, abs=1e-15)


def monte_carlo_sd(by_task: np.ndarray, samples: int) -> np.ndarray:
    """Standard deviation of bootstrap_ci's (low, high) over independent random streams."""
    ends = [bootstrap_ci(by_task, np.random.default_rng(s), samples) for s in range(MC_REPEATS)]
    return np.std(ends, axis=0, ddof=1)


@pytest.mark.heavy
def test_meta_eval_summary_agrees_with_rliable_within_monte_carlo_error(
    rliable: tuple[Any, Any], global_numpy_seed: Callable[[int], None]
) -> None:
    """summarise's IQM and 95% interval against rliable's on the same scores.

    What is compared: the cell meta-eval writes (summarise, as meta-eval calls it) and
    rliable.library.get_interval_estimates with rliable.metrics.aggregate_iqm, percentile
    method, task_bootstrap=False, both with REPLICATES replicates. The designs are the same:
    each replicate draws, within every task, as many seeds as it has, with replacement, and
    takes the IQM of all resampled values; the interval is np.percentile's 2.5 and 97.5
    percentiles of the replicates (test_bootstrap_ci_given_rliables_draws_gives_rliables_interval
    shows them equal given the same draws). Only the random streams differ. One difference
    outside this comparison: when a cell's tasks have different numbers of seeds, summarise
    pools all values into one stratum, where rliable takes no ragged input at all.

    Tolerance: each interval end is a Monte Carlo estimate (an empirical percentile of
    REPLICATES replicates). If the designs agree, ours and rliable's are two independent
    draws of the same estimator, so their difference has standard deviation sqrt(2) * sd,
    with sd measured here as the spread of our ends over MC_REPEATS independent streams.
    The ends must agree within Z = 5 such standard deviations (a false alarm below 1e-4 even
    with sd estimated from 30 repeats; all seeds are fixed, so the outcome is deterministic).
    At 10,000 replicates that is about half a percent of each metric's range, and an
    unstratified bootstrap (the design error this would catch) misses by more than 10 times it.
    """
    reward, success = scores()
    rows = [
        Measurement(
            "reptile", "FindTarget", "test", t, s, 1, 128, reward[t, s], success[t, s], 64, "{}"
        )
        for t in range(TASKS)
        for s in range(SEEDS)
    ]
    (cell,) = summarise(rows, samples=REPLICATES)
    ours = {
        "reward": (cell.reward_iqm, cell.reward_low, cell.reward_high),
        "success": (cell.success_iqm, cell.success_low, cell.success_high),
    }
    global_numpy_seed(1)
    for metric, by_task in (("reward", reward), ("success", success)):
        point, low, high = rliable_iqm(rliable, by_task, REPLICATES)
        assert ours[metric][0] == pytest.approx(point, rel=1e-12), metric
        tolerance = Z * math.sqrt(2.0) * monte_carlo_sd(by_task, REPLICATES)
        assert np.all(tolerance < 0.01 * np.ptp(by_task)), (metric, tolerance)
        assert np.all(np.abs(np.subtract(ours[metric][1:], (low, high))) <= tolerance), metric
        pooled = bootstrap_ci(by_task.reshape(1, -1), np.random.default_rng(0), REPLICATES)
        assert np.all(np.abs(np.subtract(pooled, (low, high))) > 10 * tolerance), metric


# --- several meta-training seeds: the hierarchical bootstrap ------------------------------------


class _RliableSeedDraws:
    """bootstrap_ci's draws when every seed's scores are constant: rliable's, for the seed level.

    The first draw picks meta-training seeds, (samples, metas): rliable's StratifiedBootstrap
    of a (runs=metas, tasks=1) matrix takes np.random.choice(metas, (metas, 1)) per replicate.
    The adaptation seeds drawn next cannot matter (one per meta-training seed).
    """

    def __init__(self) -> None:
        self.calls = 0

    def integers(self, low: int, high: int, size: tuple[int, ...]) -> np.ndarray:
        self.calls += 1
        if self.calls == 1:
            samples, metas = size
            return np.stack([np.random.choice(high, (metas, 1))[:, 0] for _ in range(samples)])
        return np.zeros(size, np.int64)


def test_seed_level_given_rliables_draws_gives_rliables_interval(
    rliable: tuple[Any, Any], global_numpy_seed: Callable[[int], None]
) -> None:
    per_seed = np.array([0.2, 0.5, 0.55, 0.9, 0.95])  # five meta-training seeds, one task
    scores = per_seed[:, None, None]  # (metas, tasks=1, adaptation seeds=1)
    global_numpy_seed(11)
    _, low, high = rliable_iqm(rliable, per_seed[None, :], 2000)
    global_numpy_seed(11)
    ours = bootstrap_ci(scores, _RliableSeedDraws(), 2000)  # type: ignore[arg-type]
    assert ours == pytest.approx((low, high), rel=1e-12, abs=1e-15)


def test_intervals_cover_meta_training_where_rliables_per_run_intervals_do_not(
    rliable: tuple[Any, Any], global_numpy_seed: Callable[[int], None]
) -> None:
    # Three meta-training seeds whose starts differ: one seed's rliable interval (tasks x
    # adaptation seeds, as meta-eval reported before) is narrow and misses the other seeds;
    # the hierarchical interval is wider than rliable's over all runs pooled as exchangeable.
    rng = np.random.default_rng(5)
    offsets = np.array([0.1, 0.5, 0.9])[:, None, None]
    scores = offsets + 0.05 * rng.standard_normal((3, TASKS, SEEDS))
    global_numpy_seed(3)
    _, low_one, high_one = rliable_iqm(rliable, scores[0], 2000)
    pooled = scores.transpose(1, 0, 2).reshape(TASKS, -1)  # (tasks, metas * seeds)
    _, low_pooled, high_pooled = rliable_iqm(rliable, pooled, 2000)
    low, high = bootstrap_ci(scores, np.random.default_rng(0), 2000)
    per_seed_iqm = [float(iqm(s.ravel())) for s in scores]
    assert not low_one <= per_seed_iqm[2] <= high_one
    assert high - low > 2 * (high_pooled - low_pooled)
    assert low <= float(iqm(scores.ravel())) <= high


def test_one_meta_seed_is_exactly_the_stratified_bootstrap() -> None:
    _, success = scores()
    two_d = bootstrap_ci(success, np.random.default_rng(4), 500)
    assert bootstrap_ci(success[None], np.random.default_rng(4), 500) == two_d


def test_steps_to_target_with_hand_values_and_its_interval() -> None:
    rows = [
        Measurement("reptile", "F", "test", task, seed, b, 100 * b, 0.0, v, 4, "{}", meta)
        for meta, curve in ((0, [0.0, 0.9, 1.0]), (1, [0.0, 0.5, 0.9]))
        for b, v in zip([0, 1, 2], curve, strict=True)
        for task in range(2)
        for seed in range(2)
    ]
    (result,) = steps_to_target(rows, 0.8, samples=400)
    # pooled IQM at budget 1 is 0.7 (< 0.8), at budget 2 0.95: 200 steps; a replicate drawing
    # seed 0 twice reaches it at 100, one drawing seed 1 twice at 200
    assert (result.family, result.method, result.steps_to_80) == ("F", "reptile", 200)
    assert (result.ci_low, result.ci_high) == (100, 200)
    never = [replace(r, success=0.1) for r in rows]
    (missed,) = steps_to_target(never, 0.8, samples=100)
    assert math.isnan(missed.steps_to_80) and math.isnan(missed.ci_high)


# --- eval.reach: the first crossing, or the first from which the curve stays ------------------

WOBBLY = [0.0, 0.9, 0.5, 0.85, 0.9]
"""Above 0.8 at budget 1, below at 2, above from 3 on: first 100 steps, sustained 300."""


def _curve_rows(curve: list[float], meta_seeds: int = 2) -> list[Measurement]:
    """The same curve for every meta-seed, task and seed: its IQM and every replicate's."""
    return [
        Measurement("reptile", "F", "test", task, seed, b, 100 * b, 0.0, v, 4, "{}", meta)
        for meta in range(meta_seeds)
        for b, v in enumerate(curve)
        for task in range(2)
        for seed in range(2)
    ]


def test_a_sustained_crossing_is_the_first_budget_from_which_the_curve_stays() -> None:
    steps = [100 * b for b in range(len(WOBBLY))]
    assert steps_to_threshold(steps, WOBBLY, 0.8) == 100
    assert steps_to_threshold(steps, WOBBLY, 0.8, "sustained") == 300
    fallen = [*WOBBLY[:-1], 0.7]  # crosses twice, ends below: never sustained
    assert steps_to_threshold(steps, fallen, 0.8) == 100
    assert math.isnan(steps_to_threshold(steps, fallen, 0.8, "sustained"))
    assert steps_to_threshold(steps, [0.9] * 5, 0.8, "sustained") == 0
    with pytest.raises(ValueError, match="unknown reach 'last'"):
        steps_to_threshold(steps, WOBBLY, 0.8, "last")


def test_sustained_reads_the_point_estimate_and_every_replicate_alike() -> None:
    rows = _curve_rows(WOBBLY)
    (first,) = steps_to_target(rows, 0.8, samples=100)
    (sustained,) = steps_to_target(rows, 0.8, samples=100, reach="sustained")
    assert (first.steps_to_80, first.ci_low, first.ci_high) == (100, 100, 100)
    assert (sustained.steps_to_80, sustained.ci_low, sustained.ci_high) == (300, 300, 300)
    assert sustained.auc == first.auc  # the area does not depend on the reading
    (cell, *_) = summarise(rows, samples=100, reach="sustained")
    assert cell.steps_to_80 == 300
    assert summarise(rows, samples=100)[0].steps_to_80 == 100


def test_a_replicate_that_falls_back_is_not_sustained() -> None:
    # meta-seed 0 stays at 0.9 from budget 1; meta-seed 1 falls to 0.75 at the last budget.
    # Pooled, the IQM stays (0.9, 0.9, 0.825): sustained at 100. A replicate that draws
    # meta-seed 1 twice falls at the end (never sustained), one with meta-seed 0 stays from 100.
    rows = [
        replace(r, success=0.75)
        if (r.meta_seed, r.budget) == (1, 3)
        else replace(r, success=0.9 if r.budget else 0.0)
        for r in _curve_rows([0.0, 0.9, 0.9, 0.9])
    ]
    (first,) = steps_to_target(rows, 0.8, samples=400)
    (sustained,) = steps_to_target(rows, 0.8, samples=400, reach="sustained")
    assert (first.steps_to_80, first.ci_low, first.ci_high) == (100, 100, 100)
    assert sustained.steps_to_80 == 100 and sustained.ci_low == 100
    assert math.isnan(sustained.ci_high)  # some replicates never sustain it
