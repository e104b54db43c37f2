"""One inner training from given weights: PPO, or the ghost trainer for a game of teams.

This is the one place that knows both trainers; `ppo` never imports `selfplay`, which builds
on it (the policy, the collector's parts, the update loop, the weight copies).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from envs.interface import AgentEnvironment
from envs.tasks.teams import team_of
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.ppo.train import Schedule, policy_for, train
from meta.algorithm.ppo.weights import OptimizerState, cpu_weights, optimizer_cpu_state
from meta.algorithm.selfplay.ghost import SelfPlayState
from meta.algorithm.selfplay.trainer import game_train

__all__ = ["InnerResult", "OptimizerState", "SelfPlayState", "inner_train", "is_game"]


@dataclass
class InnerResult:
    """What one inner training produced."""

    weights: dict[str, torch.Tensor]
    stats: dict[str, float]
    updates: list[dict[str, float]] = field(default_factory=list)
    optimizer_state: OptimizerState | None = None
    """Adam's state after the training, to continue it in the next one."""
    self_play_state: SelfPlayState | None = None
    """The run's ELO after the training and, for a game, the ghost to continue it with."""
    meta_gradient: dict[str, torch.Tensor] | None = None
    """fomaml: the gradient of PPO's loss at the trained weights on a fresh buffer."""


def inner_train(
    env: AgentEnvironment,
    weights: dict[str, torch.Tensor],
    network: NetworkConfig,
    cfg: PPOConfig,
    *,
    seed: int,
    hyper: Hyper | None = None,
    stats_channel: StatsSideChannel | None = None,
    timers: Timers | None = None,
    device: str = "cpu",
    optimizer_state: OptimizerState | None = None,
    schedule: Schedule | None = None,
    self_play_state: SelfPlayState | None = None,
) -> InnerResult:
    """One inner training from `weights`; returns the trained weights, statistics and optimizer.

    `optimizer_state` continues the optimizer of an earlier training (None: a fresh one); it
    is copied, never changed. `schedule` as in `ppo.train.train`. A game of teams trains with
    the ghost trainer (cfg.self_play): `self_play_state` gives the run's ELO and, to continue
    one, the ghost; other tasks pass it through unchanged.
    """
    policy = policy_for(env, network).to(device)
    policy.load_state_dict(weights)
    optimizer = make_optimizer(policy, (hyper or Hyper.of(cfg)).learning_rate, cfg.optimizer)
    if optimizer_state is not None:
        # load_state_dict keeps tensors already on the right device: copy, as Adam steps in place
        optimizer.load_state_dict(copy.deepcopy(optimizer_state))
    if is_game(env, cfg):
        trained, game_stats, game_updates, state = game_train(
            env,
            policy,
            cfg,
            optimizer,
            seed=seed,
            hyper=hyper,
            timers=timers,
            stats_channel=stats_channel,
            schedule=schedule,
            self_play_state=self_play_state,
        )
        optimizer_out = optimizer_cpu_state(optimizer)
        return InnerResult(trained, game_stats, game_updates, optimizer_out, state)
    updates: list[dict[str, float]] = []
    stats = train(
        env,
        policy,
        cfg,
        seed=seed,
        hyper=hyper,
        stats_channel=stats_channel,
        timers=timers,
        on_update=lambda _, update: updates.append(update),
        optimizer=optimizer,
        schedule=schedule,
    )
    return InnerResult(
        cpu_weights(policy), stats, updates, optimizer_cpu_state(optimizer), self_play_state
    )


def is_game(env: AgentEnvironment, cfg: PPOConfig) -> bool:
    """Whether the env is a game of teams; ValueError if it is one and self_play is not set."""
    teams = [name for name in env.behavior_specs if team_of(name) is not None]
    if teams and cfg.self_play is None:
        raise ValueError(
            f"behaviors {', '.join(teams)} have team ids but ppo.self_play is not set: "
            "a game of teams trains with self-play (add ppo.self_play, e.g. ppo=selfplay)"
        )
    return bool(teams)
