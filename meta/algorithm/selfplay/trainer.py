"""The ghost trainer: PPO on the learning team's experience against the ghost's opponents."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import numpy as np
import torch
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.optim import Optimizer
from meta.algorithm.ppo.policy import Policy
from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.algorithm.ppo.train import Schedule, run_updates, summary
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


def ghost_train(
    env: AgentEnvironment,
    policy: Policy,
    cfg: PPOConfig,
    *,
    seed: int,
    schedule: Schedule,
    optimizer: Optimizer,
    state: SelfPlayState | None = None,
    timers: Timers | None = None,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[list[dict[str, float]], TeamCollector, SelfPlayState, int]:
    """Train `policy` in place for cfg.max_steps learning-team agent-steps with self-play.

    `state` continues a ghost (snapshots, opponent, counters, ELO) or, with only an "elo",
    starts one from the policy's weights at that rating. Returns the updates' statistics,
    the collector (its episodes and game results), the state to continue from and the
    learning team's agent-steps.
    """
    timers = timers or NullTimers()
    generator = torch.Generator().manual_seed(seed)
    ghost = ghost_for(cfg, policy, state, seed, first_team(env))
    opponent = copy.deepcopy(policy)
    collector = TeamCollector(env, policy, opponent, ghost, generator, cfg.time_horizon, timers)

    def updated(k: int, update: dict[str, float]) -> None:
        ghost.publish(cpu_weights(policy))
        if on_update is not None:
            on_update(k, update)

    history, steps = run_updates(
        collector, policy, optimizer, cfg, schedule, generator, timers, updated
    )
    return history, collector, {"elo": ghost.current_elo, "ghost": ghost.state_dict()}, steps


def game_stats(collector: TeamCollector, elo: float) -> dict[str, float]:
    """The learning policy's ELO, its team's win rate and the decisive share of its games."""
    results = np.asarray(collector.results, np.float64)
    wins = float((results == 1.0).mean()) if len(results) else float("nan")
    decisive = decisive_share(collector.results)
    return {ELO: elo, WIN_RATE: wins, DECISIVE_STAT: decisive, "games": float(len(results))}


def game_train(
    env: AgentEnvironment,
    policy: Policy,
    cfg: PPOConfig,
    optimizer: Optimizer,
    *,
    seed: int,
    hyper: Hyper | None = None,
    timers: Timers | None = None,
    stats_channel: StatsSideChannel | None = None,
    schedule: Schedule | None = None,
    self_play_state: SelfPlayState | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, float], list[dict[str, float]], SelfPlayState]:
    """inner_train for a game: trained weights, statistics, updates and the self-play state."""
    cfg.validate()
    start_hyper = hyper or Hyper.of(cfg)
    if start_hyper.learning_rate <= 0:
        raise ValueError(f"learning_rate must be > 0, got {start_hyper.learning_rate}")
    started = time.perf_counter()
    if stats_channel is not None:
        stats_channel.get_and_reset_stats()
    updates: list[dict[str, float]] = []
    history, collector, state, steps = ghost_train(
        env,
        policy,
        cfg,
        seed=seed,
        schedule=schedule or (lambda done: start_hyper.after(cfg, done, cfg.max_steps)),
        optimizer=optimizer,
        state=self_play_state,
        timers=timers,
        on_update=lambda _, update: updates.append(update),
    )
    if stats_channel is not None:
        stats_channel.get_and_reset_stats()  # the games are counted from the learning team's view
    games = game_stats(collector, state["elo"])
    stats = summary(
        history, collector.episodes, games[WIN_RATE], steps, time.perf_counter() - started
    )
    stats.update(games)
    state[SUMMARIES] = elo_summaries(collector.ratings, cfg.summary_freq, steps)
    return cpu_weights(policy), stats, updates, state
