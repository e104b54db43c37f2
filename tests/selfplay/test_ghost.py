"""meta/algorithm/selfplay/ghost.py: snapshots, swaps and team changes on ML-Agents' counters."""

from __future__ import annotations

import pytest
import torch

from meta.algorithm.selfplay.ghost import LATEST, Ghost, elo_only, run_state_after
from meta.config.ppo import SelfPlayConfig


def weights(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((2,), value)}


def make(**settings: float) -> Ghost:
    cfg = SelfPlayConfig(**settings)  # type: ignore[arg-type]
    return Ghost.start(cfg, weights(0.0), elo=1200.0, seed=3)


def test_snapshots_start_from_the_initial_weights_and_fill_a_ring_window() -> None:
    g = make(save_steps=10, window=3, swap_steps=10**9, team_change=10**9)
    assert len(g.snapshots) == 1 and torch.equal(g.snapshots[0]["w"], weights(0.0)["w"])
    assert torch.equal(g.opponent["w"], weights(0.0)["w"]) and g.current_opponent == 0
    for k in range(1, 6):
        g.publish(weights(float(k)))
        g.advance(11, 11)  # more than save_steps since the last save: a snapshot each time
    assert [float(s["w"][0]) for s in g.snapshots] == [3.0, 4.0, 5.0]
    assert g.snapshot_counter == 0  # the next snapshot overwrites the oldest (slot 0)


def test_snapshot_is_taken_only_after_more_than_save_steps() -> None:
    g = make(save_steps=10, window=5, swap_steps=10**9, team_change=10**9)
    g.advance(10, 10)
    assert len(g.snapshots) == 1
    g.advance(1, 1)
    assert len(g.snapshots) == 2 and g.last_save == 11


def test_team_changes_after_team_change_steps_and_brings_a_new_opponent() -> None:
    g = make(save_steps=10**9, team_change=20, swap_steps=10**9)
    assert g.advance(20, 20) == (False, False) and g.learning_team == 0
    assert g.advance(1, 1) == (True, True) and g.learning_team == 1
    assert g.last_team_change == 21 and g.last_swap == 21


def test_opponents_follow_the_latest_model_ratio() -> None:
    g = make(swap_steps=1, save_steps=1, window=10, team_change=10**9)
    for k in range(10):
        g.publish(weights(float(k + 1)))
        g.advance(2, 0)  # snapshots only
    latest = 0
    for _ in range(2000):
        g.advance(0, 2)
        latest += g.current_opponent == LATEST
        if g.current_opponent != LATEST:
            assert g.opponent is g.snapshots[g.current_opponent]
    assert latest / 2000 == pytest.approx(0.5, abs=0.04)
    never = make(swap_steps=1, play_against_latest_model_ratio=0.0)
    always = make(swap_steps=1, play_against_latest_model_ratio=1.0)
    for _ in range(50):
        never.advance(0, 2)
        always.advance(0, 2)
        assert never.current_opponent != LATEST and always.current_opponent == LATEST


def test_state_dict_round_trip_continues_exactly() -> None:
    g = make(save_steps=3, swap_steps=2, window=4, team_change=7)
    for k in range(9):
        g.publish(weights(float(k)))
        g.advance(2, 2)
        g.record_games([1.0, 0.5])
    copy = Ghost.from_state_dict(g.cfg, g.state_dict())
    for k in range(20):
        for each in (g, copy):
            each.publish(weights(float(k + 10)))
            each.advance(2, 3)
            each.record_games([0.0, 1.0])
        assert copy.policy_elos == g.policy_elos
        assert (copy.current_opponent, copy.learning_team) == (g.current_opponent, g.learning_team)
        assert torch.equal(copy.opponent["w"], g.opponent["w"])


def test_run_state_keeps_elo_for_reptile_and_the_ghost_for_continuous_runs() -> None:
    g = make()
    game = {"elo": 1230.0, "ghost": g.state_dict()}
    other = {"elo": 1190.0, "ghost": g.state_dict()}
    assert run_state_after(None, [None, game], False, 1200.0) == {"elo": 1230.0}
    assert run_state_after({"elo": 1210.0}, [game, other], False, 1200.0) == {
        "elo": 1210.0 + 20.0 - 20.0
    }
    assert run_state_after({"elo": 1210.0}, [{"elo": 1210.0}], False, 1200.0) == {"elo": 1210.0}
    assert run_state_after(None, [{**game, "summaries": [(9, 2, 1201.0)]}], True, 1200.0) == game
    assert elo_only(game) == {"elo": 1230.0} and elo_only(None) is None


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("window", 0, "ppo.self_play.window must be >= 1, got 0"),
        ("play_against_latest_model_ratio", 1.5, "must be in [0, 1], got 1.5"),
        ("play_against_latest_model_ratio", -0.1, "must be in [0, 1], got -0.1"),
        ("save_steps", 0, "ppo.self_play.save_steps must be > 0, got 0"),
        ("swap_steps", -5, "ppo.self_play.swap_steps must be > 0, got -5"),
        ("team_change", 0, "ppo.self_play.team_change must be > 0, got 0"),
    ],
)
def test_settings_out_of_range_are_one_line_errors(
    setting: str, value: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SelfPlayConfig(**{setting: value}).validate()  # type: ignore[arg-type]
