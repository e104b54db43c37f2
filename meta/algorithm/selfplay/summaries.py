"""What a game's inner training reports as ML-Agents does: ELO per summary period, decisive share.

ML-Agents' ghost trainer adds the learning policy's rating to its stats after every rated
game, and its summary writes the mean of those values once per `summary_freq` steps (nothing
for a period in which no game was rated). Here the periods are counted in the learning team's
agent-steps of one inner training, and the last, shorter one ends with the training.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DECISIVE_STAT = "Self-play/Decisive Share"
"""Fraction of the learning team's games that one team won (not a draw, not a time-out)."""
Summary = tuple[int, int, float]
"""(learning-team agent-steps at the period's end, games rated in it, their mean rating)."""


def decisive_share(results: Sequence[float]) -> float:
    """Fraction of games won or lost (results 1 or 0; draws and time-outs are 0.5)."""
    if not results:
        return float("nan")
    values = np.asarray(results, np.float64)
    return float((values != 0.5).mean())


def elo_summaries(
    ratings: Sequence[tuple[int, float]], summary_freq: int, total_steps: int
) -> list[Summary]:
    """The mean rating over the games of each summary period that rated one, in order."""
    if not ratings:
        return []
    steps = np.fromiter((s for s, _ in ratings), np.int64, len(ratings))
    values = np.fromiter((e for _, e in ratings), np.float64, len(ratings))
    period = (steps - 1) // summary_freq
    out: list[Summary] = []
    for k in np.unique(period).tolist():
        mine = period == k
        end = min((k + 1) * summary_freq, total_steps)
        out.append((int(end), int(mine.sum()), float(values[mine].mean())))
    return out


def summary_mean(summaries: Sequence[Summary]) -> float:
    """The mean rating over all the games of some summaries (NaN without games)."""
    games = sum(g for _, g, _ in summaries)
    return sum(g * m for _, g, m in summaries) / games if games else float("nan")
