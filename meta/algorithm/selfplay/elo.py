"""ELO as ML-Agents' ghost controller computes it: a 400-point scale, one update per game."""

from __future__ import annotations

from collections.abc import Iterable


def expected_score(rating: float, opponent: float) -> float:
    """Probability of a win (draws count half) of a player rated `rating` against `opponent`."""
    r1, r2 = 10.0 ** (rating / 400.0), 10.0 ** (opponent / 400.0)
    return r1 / (r1 + r2)


def compute_elo_rating_change(rating: float, opponent: float, result: float) -> float:
    """The change of `rating` after one game: result - expected; result 1, 0.5 or 0.

    As ML-Agents' GhostController.compute_elo_rating_changes: no K factor (K = 1), so one
    game moves a rating by less than one point.
    """
    return result - expected_score(rating, opponent)


def result_of(final_reward: float) -> float:
    """A game's result read from its final reward, as ML-Agents reads it: >0 win, <0 loss."""
    return 1.0 if final_reward > 0 else 0.0 if final_reward < 0 else 0.5


def play_out(rating: float, opponent: float, results: Iterable[float]) -> tuple[float, float]:
    """Both ratings after games in order: the player gains what the opponent loses."""
    # One game after the other: each game's expectation depends on the ratings so far.
    for result in results:
        change = compute_elo_rating_change(rating, opponent, result)
        rating += change
        opponent -= change
    return rating, opponent
