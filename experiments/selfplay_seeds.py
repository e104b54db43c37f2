"""`python experiments/selfplay_seeds.py > experiments/selfplay/elo.md`: the learning test per seed.

Sumo's default task with the learning test's budget (`meta.evaluation.reference`: 64 areas,
500,000 learning-team agent-steps, ML-Agents' self_play defaults), one torch thread, for each
seed s (environment seed 1 + s, theta seed s, training seed 3 + s; seed 0 is the learning test
and the reference player). Prints the table the Results page shows (`--seeds` picks others).
"""

from __future__ import annotations

import argparse
import time

from meta.algorithm.selfplay.summaries import DECISIVE_STAT
from meta.evaluation import reference


def row(seed: int) -> str:
    """One seed's training as a markdown table row."""
    started = time.perf_counter()
    result, _ = reference.train(seed=seed)
    wall = time.perf_counter() - started
    state = result.self_play_state
    assert state is not None
    elo = state["elo"]
    curve = ", ".join(f"{mean:.0f}" for _, _, mean in state["summaries"])
    return (
        f"| {seed} | {result.stats['games']:,.0f} | {result.stats[DECISIVE_STAT]:.1%} "
        f"| {elo:.1f} | {elo - budget_elo():+.1f} | {curve} | {wall:.0f} s |"
    )


def budget_elo() -> float:
    """The rating every training starts from."""
    config = reference.budget().self_play
    assert config is not None
    return config.initial_elo


def main() -> None:
    """Print the table's heading and one row per seed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    seeds = parser.parse_args().seeds
    print("| seed | games | decisive | final ELO | rise | `Self-play/ELO` per summary | wall |")
    print("|---|---|---|---|---|---|---|")
    for seed in seeds:
        print(row(seed), flush=True)


if __name__ == "__main__":
    main()
