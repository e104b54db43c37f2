"""The ghost's ratings (meta/algorithm/selfplay/ghost.py): ML-Agents' formula, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from meta.algorithm.selfplay.ghost import (
    LATEST,
    Ghost,
    compute_elo_rating_change,
    expected_score,
    result_of,
)
from meta.config.ppo import SelfPlayConfig


def test_expected_score_on_the_400_point_scale() -> None:
    assert expected_score(1200.0, 1200.0) == 0.5
    assert expected_score(1600.0, 1200.0) == pytest.approx(10 / 11)  # 400 points: odds 10:1
    assert expected_score(1200.0, 1600.0) == pytest.approx(1 / 11)


def test_change_is_result_minus_expected_without_a_k_factor() -> None:
    # ML-Agents' GhostController.compute_elo_rating_changes: change = result - e1 (K = 1).
    assert compute_elo_rating_change(1200.0, 1200.0, 1.0) == 0.5
    assert compute_elo_rating_change(1200.0, 1200.0, 0.5) == 0.0
    assert compute_elo_rating_change(1200.0, 1200.0, 0.0) == -0.5
    assert compute_elo_rating_change(1600.0, 1200.0, 1.0) == pytest.approx(1 / 11)
    assert compute_elo_rating_change(1600.0, 1200.0, 0.0) == pytest.approx(-10 / 11)


def test_result_is_read_from_the_final_reward_as_ml_agents_reads_it() -> None:
    assert [result_of(r) for r in (1.0, 0.3, 0.0, -0.2, -1.0)] == [1.0, 1.0, 0.5, 0.0, 0.0]


def test_games_in_order_move_both_ratings_by_opposite_amounts() -> None:
    g = ghost()
    assert g.record_games([1.0, 1.0]) == [1200.5, pytest.approx(1200.5 + SECOND)]
    assert g.policy_elos[0] == pytest.approx(1199.5 - SECOND)
    assert g.current_elo + g.policy_elos[0] == pytest.approx(2400.0)


SECOND = 1 - 1 / (1 + 10 ** (-1 / 400))
"""The second win's change: 1200.5 against 1199.5."""


def ghost(**settings: float) -> Ghost:
    weights = {"w": torch.zeros(2)}
    return Ghost.start(SelfPlayConfig(**settings), weights, elo=1200.0, seed=0)  # type: ignore[arg-type]


def test_a_win_against_a_snapshot_moves_the_snapshots_rating_the_other_way() -> None:
    g = ghost()
    assert g.current_opponent == 0 and g.policy_elos == [1200.0] * 11
    g.record_games([1.0])
    assert g.current_elo == 1200.5 and g.policy_elos[0] == 1199.5


def test_games_against_the_latest_weights_leave_the_rating_unchanged() -> None:
    # ML-Agents rates the latest policy with its own entry: the change cancels.
    g = ghost()
    g.current_opponent = LATEST
    g.record_games([1.0, 0.0, 1.0])
    assert g.current_elo == 1200.0
    assert math.isclose(sum(g.policy_elos), 1200.0 * 11)
