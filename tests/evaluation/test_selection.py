"""Selection of each start's adaptation procedure: fewest steps to the target, on one split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from meta.evaluation.selection import area, chosen, select
from meta.evaluation.statistics import Measurement

SGD, ADAM = "sgd lr=0.1 buffer=2048", "adam lr=0.003 buffer=512"


def _rows(
    method: str,
    adaptation: str,
    curve: list[float],
    split: str = "validation",
    per_update: int = 2048,
    pretraining: str = "",
) -> list[Measurement]:
    return [
        Measurement(
            method,
            "FindTarget",
            split,
            task,
            seed,
            budget,
            budget * per_update,
            0.0,
            value,
            8,
            "{}",
            adaptation=adaptation,
            pretraining=pretraining,
        )
        for budget, value in zip([0, 1, 2, 4], curve, strict=True)
        for task in range(2)
        for seed in range(2)
    ]


def test_the_fewest_env_steps_win_across_update_sizes() -> None:
    rows = _rows("reptile", SGD, [0.0, 0.5, 0.9, 1.0]) + _rows(
        "reptile", ADAM, [0.0, 0.2, 0.5, 0.85], per_update=512
    )
    table = select(rows, "validation", 0.8, samples=50)
    by = {r.adaptation: r for r in table}
    # sgd: 0.9 at 2 updates of 2048 = 4096 steps; adam: 0.85 at 4 updates of 512 = 2048
    assert (by[SGD].steps_to_80, by[ADAM].steps_to_80) == (4096, 2048)
    assert chosen(table) == {("FindTarget", "reptile"): ("", ADAM)}


def test_ties_go_to_the_larger_area_under_the_success_curve() -> None:
    rows = _rows("scratch", SGD, [0.0, 0.3, 0.8, 0.9]) + _rows(
        "scratch", ADAM, [0.0, 0.6, 0.8, 0.9]
    )
    table = select(rows, "validation", 0.8, samples=50)
    assert {r.steps_to_80 for r in table} == {4096}
    assert chosen(table)[("FindTarget", "scratch")] == ("", ADAM)
    # nobody reaches it: the area alone decides
    never = _rows("scratch", SGD, [0.0, 0.1, 0.2, 0.3]) + _rows(
        "scratch", ADAM, [0.0, 0.2, 0.3, 0.4]
    )
    table = select(never, "validation", 0.8, samples=50)
    assert all(math.isnan(r.steps_to_80) for r in table)
    assert chosen(table)[("FindTarget", "scratch")] == ("", ADAM)


def test_joint_pretrainings_compete_with_their_procedures() -> None:
    rows = _rows("joint", SGD, [0.1, 0.5, 0.6, 0.9], pretraining="sgd") + _rows(
        "joint", SGD, [0.4, 0.9, 0.9, 0.9], pretraining="adam"
    )
    assert chosen(select(rows, "validation", 0.8, samples=50)) == {
        ("FindTarget", "joint"): ("adam", SGD)
    }


def test_test_results_cannot_change_the_selection() -> None:
    """Whatever the test split says (here: the opposite), the choice is the selection split's."""
    validation = _rows("reptile", SGD, [0.0, 0.5, 0.9, 1.0]) + _rows(
        "reptile", ADAM, [0.0, 0.1, 0.2, 0.3]
    )
    expected = select(validation, "validation", 0.8, samples=50)
    rng = np.random.default_rng(0)
    for _ in range(5):
        noise = rng.uniform(0.0, 1.0, 4).tolist()
        test = _rows("reptile", SGD, [0.0] * 4, "test") + _rows("reptile", ADAM, noise, "test")
        assert select(validation + test, "validation", 0.8, samples=50) == expected
    assert chosen(expected)[("FindTarget", "reptile")] == ("", SGD)


def test_area_is_the_mean_of_the_curve_over_a_common_horizon() -> None:
    x, y = np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 1.0])
    assert area(x, y, 2.0) == pytest.approx(0.75)
    assert area(x, y, 1.0) == pytest.approx(0.5)  # the horizon cuts the curve
    assert area(x, y, 0.5) == pytest.approx(0.25)  # interpolated at the horizon


def test_a_sustained_reach_prefers_the_curve_that_stays() -> None:
    # sgd crosses first and falls back; adam crosses later and stays
    rows = _rows("reptile", SGD, [0.0, 0.9, 0.5, 0.9]) + _rows(
        "reptile", ADAM, [0.0, 0.5, 0.85, 0.9]
    )
    first = {r.adaptation: r.steps_to_80 for r in select(rows, "validation", 0.8, samples=50)}
    assert first == {SGD: 2048, ADAM: 4096}
    assert chosen(select(rows, "validation", 0.8, samples=50)) == {
        ("FindTarget", "reptile"): ("", SGD)
    }
    table = select(rows, "validation", 0.8, samples=50, reach="sustained")
    assert {r.adaptation: r.steps_to_80 for r in table} == {SGD: 8192, ADAM: 4096}
    assert chosen(table) == {("FindTarget", "reptile"): ("", ADAM)}
