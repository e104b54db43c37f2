"""The ghost trainer: PPO on the learning team's experience against the ghost's opponents."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np

from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.policy import Policy
from meta.algorithm.ppo.train import PPORun, run_updates, summary
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.selfplay.ghost import SUMMARIES, Ghost, SelfPlayState
from meta.algorithm.selfplay.rollout import TeamCollector, first_team
from meta.algorithm.selfplay.summaries import DECISIVE_STAT, decisive_share, elo_summaries
from meta.observe.tags import ELO, WIN_RATE

GHOST_SEED = 0x6057


def ghost_for(
    cfg: PPOConfig, policy: Policy, state: SelfPlayState | None, seed: int, learning_team: int = 0
) -> Ghost:
    """The ghost a training continues (state["ghost"]) or starts from the policy's weights."""
    self_play = cfg.self_play
    assert self_play is not None
    if state is not None and "ghost" in state:
        return Ghost.from_state_dict(self_play, state["ghost"])
    elo = self_play.initial_elo if state is None else float(state["elo"])
    seed_seq = np.random.SeedSequence([seed, GHOST_SEED]).generate_state(1)[0]
    return Ghost.start(self_play, cpu_weights(policy), elo, int(seed_seq), learning_team)


@dataclass
class GhostOutcome:
    """What the ghost trainer leaves: updates, the collector's games, the state, the steps."""

    updates: list[dict[str, float]]
    collector: TeamCollector
    """Its episodes, game results and ratings."""
    state: SelfPlayState
    """The state to continue from: {"elo", "ghost"}."""
    steps: int
    """The learning team's agent-steps."""


def ghost_train(run: PPORun, state: SelfPlayState | None = None) -> GhostOutcome:
    """Train `run.policy` in place for cfg.max_steps learning-team agent-steps with self-play.

    `state` continues a ghost (snapshots, opponent, counters, ELO) or, with only an "elo",
    starts one from the policy's weights at that rating.
    """
    if run.cfg.buffer_assembly == "pieces":
        raise ValueError("ppo.buffer_assembly=pieces: games of teams collect whole buffers")
    optimizer, schedule, generator = run.begin()
    policy, cfg = run.policy, run.cfg
    ghost = ghost_for(cfg, policy, state, run.seed, first_team(run.env))
    opponent = copy.deepcopy(policy)
    collector = TeamCollector(
        run.env, policy, opponent, ghost, generator, cfg.time_horizon, run.timers
    )

    def updated(k: int, update: dict[str, float]) -> None:
        ghost.publish(cpu_weights(policy))
        if run.on_update is not None:
            run.on_update(k, update)

    history, steps = run_updates(
        collector, policy, optimizer, cfg, schedule, generator, run.timers, updated, run.updates
    )
    after = {"elo": ghost.current_elo, "ghost": ghost.state_dict()}
    return GhostOutcome(history, collector, after, steps)


def game_stats(collector: TeamCollector, elo: float) -> dict[str, float]:
    """The learning policy's ELO, its team's win rate and the decisive share of its games."""
    results = np.asarray(collector.results, np.float64)
    wins = float((results == 1.0).mean()) if len(results) else float("nan")
    decisive = decisive_share(collector.results)
    return {ELO: elo, WIN_RATE: wins, DECISIVE_STAT: decisive, "games": float(len(results))}


def game_train(
    run: PPORun, state: SelfPlayState | None = None
) -> tuple[dict[str, float], SelfPlayState]:
    """PPO's `train` for a game: the training's statistics and the self-play state after it."""
    started = time.perf_counter()
    outcome = ghost_train(run, state)
    if run.stats_channel is not None:
        run.stats_channel.get_and_reset_stats()  # games are counted from the learning team's view
    games = game_stats(outcome.collector, outcome.state["elo"])
    elapsed = time.perf_counter() - started
    stats = summary(
        outcome.updates, outcome.collector.episodes, games[WIN_RATE], outcome.steps, elapsed
    )
    stats.update(games)
    outcome.state[SUMMARIES] = elo_summaries(
        outcome.collector.ratings, run.cfg.summary_freq, outcome.steps
    )
    return stats, outcome.state
