"""The one runner of a training request: PPO, or the ghost trainer for a game of teams.

This is the one place that knows both trainers; `ppo` never imports `selfplay`, which builds
on it (the policy, the collector's parts, the update loop, the weight copies).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from envs.interface import AgentEnvironment, TaskEnvironment
from envs.tasks.teams import team_of
from meta.algorithm.fomaml import meta_gradient
from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.policy import Policy
from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.algorithm.ppo.train import PPORun, policy_for
from meta.algorithm.ppo.train import train as ppo_train
from meta.algorithm.ppo.weights import cpu_weights, optimizer_cpu_state
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.resets import reset_keys
from meta.algorithm.selfplay.trainer import game_train

__all__ = ["is_game", "start_policy", "train"]


def train(
    request: TrainRequest, env: AgentEnvironment, timers: Timers | None = None
) -> TrainResult:
    """Train the request's start in `env`; the trained weights, statistics and what it asked for.

    The request's optimizer state is copied, never changed. A game of teams trains with the
    ghost trainer (ppo.self_play) from the request's self-play state; other tasks pass that
    state through unchanged. A request of 0 updates gives back its start alone.
    """
    timers = timers or NullTimers()
    cfg, hyper = request.ppo, request.hyper
    policy = start_policy(request, env)
    snapshots = {0: cpu_weights(policy)} if 0 in request.snapshots else {}
    if request.updates == 0:
        return TrainResult(cpu_weights(policy), {}, snapshots=snapshots)
    start = (hyper or Hyper.of(cfg)).learning_rate
    optimizer = make_optimizer(policy, start, cfg.optimizer, cfg.adam_epsilon, cfg.action_scale)
    if request.optimizer_state is not None:
        # load_state_dict keeps tensors already on the right device: copy, as Adam steps in place
        optimizer.load_state_dict(copy.deepcopy(request.optimizer_state))
    updates: list[dict[str, float]] = []

    def updated(k: int, update: dict[str, float]) -> None:
        updates.append(update)
        if k in request.snapshots:
            snapshots[k] = cpu_weights(policy)

    run = PPORun(
        env,
        policy,
        cfg,
        request.seed,
        hyper=hyper,
        optimizer=optimizer,
        schedule=None if request.schedule is None else request.schedule.at,
        stats_channel=getattr(env, "stats_channel", None),
        timers=timers,
        on_update=updated,
        updates=request.updates,
    )
    state = request.self_play_state
    if is_game(env, cfg):
        stats, state = game_train(run, state)
    else:
        stats = ppo_train(run)
    kept = optimizer_cpu_state(optimizer) if request.returns_optimizer else None
    result = TrainResult(cpu_weights(policy), stats, updates, kept, state, snapshots=snapshots)
    if request.meta_gradient:
        with timers.scope("meta_gradient"):
            result = _with_meta_gradient(request, env, result)
    return result


def start_policy(request: TrainRequest, env: AgentEnvironment) -> Policy:
    """The request's start on its device: its weights, or a fresh policy from its seed.

    The request's resets take their parts from the fresh policy of its seed (a scratch start
    is that policy already: resets leave it as it is).
    """
    fresh = request.weights is None
    policy = policy_for(env, request.network, seed=request.seed if fresh else 0)
    policy = policy.to(request.device)
    if request.weights is not None:
        policy.load_state_dict(request.weights)
        if request.reset:
            new = policy_for(env, request.network, seed=request.seed).state_dict()
            keys = reset_keys(new, request.reset)
            policy.load_state_dict({**policy.state_dict(), **{k: new[k] for k in keys}})
    if request.log_std is not None:
        with torch.no_grad():
            policy.log_std.fill_(request.log_std)
    return policy


def _with_meta_gradient(
    request: TrainRequest, env: TaskEnvironment | AgentEnvironment, result: TrainResult
) -> TrainResult:
    """The result with FOMAML's meta-gradient, its buffer counted in the training's steps."""
    hyper = request.hyper or Hyper.of(request.ppo)
    gradient, steps = meta_gradient(
        env, result.weights, request.network, request.ppo, hyper, request.seed, request.device
    )
    stats = {**result.stats, "steps": result.stats["steps"] + steps}
    return replace(result, meta_gradient=gradient, stats=stats)


def is_game(env: AgentEnvironment, cfg: PPOConfig) -> bool:
    """Whether the env is a game of teams; ValueError if it is one and self_play is not set."""
    teams = [name for name in env.behavior_specs if team_of(name) is not None]
    if teams and cfg.self_play is None:
        raise ValueError(
            f"behaviors {', '.join(teams)} have team ids but ppo.self_play is not set: "
            "a game of teams trains with self-play (add ppo.self_play, e.g. ppo=selfplay)"
        )
    return bool(teams)
