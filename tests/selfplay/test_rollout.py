"""selfplay/trainer.py's Game: team changes reset the games; time-outs rate nothing."""

from __future__ import annotations

import math

import numpy as np
import torch
from mlagents_envs.base_env import BehaviorMapping

import envs
from envs.tasks.teams import TEAM_BEHAVIORS, TeamTaskEnv
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import PolicyStack, policy_for
from meta.algorithm.ppo.rollout import Collector, NullTimers
from meta.algorithm.ppo.train import Stack, train_stack
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.selfplay.ghost import Ghost
from meta.algorithm.selfplay.summaries import decisive_share, elo_summaries, summary_mean
from meta.algorithm.selfplay.trainer import Game, GameSession, first_team
from meta.config.ppo import NetworkConfig, PPOConfig, SelfPlayConfig


def collector(cfg: SelfPlayConfig, **params: float) -> tuple[Collector, Game]:
    env = envs.make("Sumo", num_areas=8, seed=4, **params)
    policy = policy_for(env, NetworkConfig(hidden_units=16), seed=0)
    ghost = Ghost.start(cfg, cpu_weights(policy), elo=1200.0, seed=1)
    generator = torch.Generator().manual_seed(2)
    game = Game(env, policy, ghost, generator)
    return Collector(env, game, policy, generator, 64, threads=1), game


def test_a_team_change_resets_every_game_and_cuts_every_trajectory() -> None:
    # 8 areas, team_change 40: the team changes after the 6th step (48 > 40).
    c, game = collector(SelfPlayConfig(team_change=40, save_steps=10**6, swap_steps=10**6))
    rollout = c.collect(6)
    assert game.ghost.learning_team == 1 and game.ghost.last_swap == 48
    assert bool(rollout.boundaries[5].all()) and not bool(rollout.boundaries[4].any())
    collection = c.collection
    assert np.all(collection.episode_length == 0) and np.all(collection.episode_return == 0.0)
    assert np.all(game.obs[..., -1] == 1.0)  # every game at its start: the whole episode left
    assert c.episodes.returns == []  # the unfinished games are not counted
    np.testing.assert_array_equal(rollout.obs[5].numpy()[..., -1], np.float32(1 - 5 / 100))


def test_time_outs_count_as_draws_in_the_results_but_move_no_rating() -> None:
    # max_step 3 in a large arena: every game times out before anyone is pushed out.
    c, game = collector(SelfPlayConfig(), max_step=3, arena_size=40.0, arena_shrink=0.0)
    c.collect(9)
    assert game.results == [0.5] * 24
    assert game.ghost.policy_elos == [1200.0] * 11


def test_games_that_end_move_the_ratings_by_ml_agents_change() -> None:
    c, game = collector(SelfPlayConfig(play_against_latest_model_ratio=0.0), arena_size=3.2)
    c.collect(100)
    decided = [r for r in game.results if r != 0.5]
    assert decided, "no game ended in 100 steps"
    # Every game was against snapshot 0 (no swap, no save yet): the ratings are a zero-sum pair.
    ghost = game.ghost
    assert ghost.current_opponent == 0
    assert ghost.current_elo + ghost.policy_elos[0] == 2400.0
    assert ghost.current_elo != 1200.0 and abs(ghost.current_elo - 1200.0) < len(game.results)


class TeamOneFirst(TeamTaskEnv):
    """A game whose behaviors register team 1 first (as a build may: the order is Unity's)."""

    def __init__(self) -> None:
        super().__init__(envs.family("Sumo"), num_areas=8, seed=4)
        specs = dict(self._specs)
        self._specs = BehaviorMapping({name: specs[name] for name in reversed(TEAM_BEHAVIORS)})


def _game(env: TeamTaskEnv, cfg: PPOConfig) -> tuple[dict, int]:
    """A training of one game: the self-play state it leaves and its collector's agent-steps."""
    policy = policy_for(env, NetworkConfig(hidden_units=16), seed=0)
    sessions: list[GameSession] = []

    def session_for(i: int, member: PolicyStack, generator: torch.Generator) -> GameSession:
        sessions.append(GameSession(env, member, cfg, None, 0, generator, NullTimers()))
        return sessions[-1]

    start = Hyper.of(cfg)
    stack = Stack(
        [cpu_weights(policy)],
        cfg,
        policy.normalize,
        policy.epsilon,
        "cpu",
        [0],
        [lambda steps: start],
        [None],
    )
    (trained,) = train_stack(stack, [env], session_for)
    assert isinstance(trained.left, dict)
    return trained.left, sessions[0].game.agent_steps


def test_the_first_learning_team_is_the_first_behavior_registered() -> None:
    cfg = PPOConfig(max_steps=256, buffer_size=128, batch_size=64, num_epoch=1)
    cfg.self_play = SelfPlayConfig()
    for env, team in ((envs.make("Sumo", num_areas=8, seed=4), 0), (TeamOneFirst(), 1)):
        assert first_team(env) == team
        state, agent_steps = _game(env, cfg)  # type: ignore[arg-type]
        assert state["ghost"]["learning_team"] == team  # no team change in 256 steps
        assert agent_steps == 256


def test_elo_summaries_are_means_over_the_games_of_each_period() -> None:
    ratings = [(8, 1201.0), (8, 1203.0), (16, 1205.0), (48, 1210.0), (50, 1212.0)]
    assert elo_summaries(ratings, 16, 60) == [
        (16, 3, 1203.0),  # steps 1-16; 17-32 rated nothing: no point
        (48, 1, 1210.0),
        (60, 1, 1212.0),
    ]
    assert elo_summaries([], 16, 60) == [] and math.isnan(summary_mean([]))
    assert summary_mean([(16, 3, 1203.0), (48, 1, 1211.0)]) == 1205.0
    assert decisive_share([1.0, 0.5, 0.0, 0.5]) == 0.5 and math.isnan(decisive_share([]))
