"""The ghost trainer: PPO on the learning team's experience against the ghost's opponents.

A game's member of a stack trains with a `GameSession`: its collector steps both teams, the
ghost publishes the member's weights after each update, and the training's statistics gain
the game's (ELO, win rate, the decisive share).
"""

from __future__ import annotations

import numpy as np
import torch

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.network import Member
from meta.algorithm.ppo.rollout import Collector, Timers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.selfplay.ghost import SUMMARIES, Ghost, SelfPlayState
from meta.algorithm.selfplay.rollout import Game, first_team
from meta.algorithm.selfplay.summaries import DECISIVE_STAT, decisive_share, elo_summaries
from meta.observe.tags import ELO, SUCCESS, WIN_RATE

GHOST_SEED = 0x6057


def ghost_for(
    cfg: PPOConfig, weights: Weights, state: SelfPlayState | None, seed: int, learning_team: int = 0
) -> Ghost:
    """The ghost a training continues (state["ghost"]) or starts from `weights`."""
    self_play = cfg.self_play
    assert self_play is not None
    if state is not None and "ghost" in state:
        return Ghost.from_state_dict(self_play, state["ghost"])
    elo = self_play.initial_elo if state is None else float(state["elo"])
    seed_seq = np.random.SeedSequence([seed, GHOST_SEED]).generate_state(1)[0]
    return Ghost.start(self_play, weights, elo, int(seed_seq), learning_team)


class GameSession:
    """One member's training in a game: its team collector and its ghost."""

    def __init__(
        self,
        env: AgentEnvironment,
        member: Member,
        cfg: PPOConfig,
        state: SelfPlayState | None,
        seed: int,
        generator: torch.Generator,
        timers: Timers,
    ) -> None:
        if cfg.buffer_assembly == "pieces":
            raise ValueError("ppo.buffer_assembly=pieces: games of teams collect whole buffers")
        self.env, self.member, self.cfg = env, member, cfg
        self.ghost = ghost_for(cfg, member.weights(), state, seed, first_team(env))
        self.game = Game(env, member, self.ghost, generator)
        self.collector = Collector(env, self.game, member, generator, cfg.time_horizon, timers, 1)

    def updated(self) -> None:
        """The member's new weights are the ghost's latest."""
        self.ghost.publish(self.member.weights())

    def finish(self, stats: dict[str, float], steps: int) -> SelfPlayState:
        """The game's statistics added to `stats`; the self-play state to continue from."""
        channel = getattr(self.env, "stats_channel", None)
        if channel is not None:
            channel.get_and_reset_stats()  # games are counted from the learning team's view
        games = game_stats(self.game, self.ghost.current_elo)
        stats[SUCCESS] = games[WIN_RATE]
        stats.update(games)
        state: SelfPlayState = {"elo": self.ghost.current_elo, "ghost": self.ghost.state_dict()}
        state[SUMMARIES] = elo_summaries(self.game.ratings, self.cfg.summary_freq, steps)
        return state


def game_stats(game: Game, elo: float) -> dict[str, float]:
    """The learning policy's ELO, its team's win rate and the decisive share of its games."""
    results = np.asarray(game.results, np.float64)
    wins = float((results == 1.0).mean()) if len(results) else float("nan")
    decisive = decisive_share(game.results)
    return {ELO: elo, WIN_RATE: wins, DECISIVE_STAT: decisive, "games": float(len(results))}
