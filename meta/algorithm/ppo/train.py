"""Inner PPO with ML-Agents semantics: one training from given weights as a function."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.policy import Policy, make_policy
from meta.algorithm.ppo.rollout import (
    Collector,
    EpisodeLog,
    NullTimers,
    Rollout,
    Timers,
    revalued,
)
from meta.algorithm.ppo.update import ppo_update
from meta.algorithm.selfplay.ghost import SelfPlayState
from meta.runtime.threads import torch_threads

__all__ = [
    "SUCCESS_STAT",
    "Hyper",
    "InnerResult",
    "OptimizerState",
    "SelfPlayState",
    "cpu_weights",
    "inner_train",
    "policy_for",
    "train",
]

SUCCESS_STAT = "Environment/Success"
OptimizerState = dict[str, Any]
"""An optimizer's state_dict (Adam's moments and step counts), on the CPU."""
Schedule = Callable[[int], Hyper]
"""The learning rate, beta and epsilon after a number of agent-steps of the training."""


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


def train(
    env: AgentEnvironment,
    policy: Policy,
    cfg: PPOConfig,
    *,
    seed: int,
    hyper: Hyper | None = None,
    stats_channel: StatsSideChannel | None = None,
    timers: Timers | None = None,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    schedule: Schedule | None = None,
) -> dict[str, float]:
    """Train `policy` in place for cfg.max_steps agent-steps; return stats.

    `hyper` gives the starting learning rate, beta and epsilon (the outer loop anneals them);
    within the training each follows its `*_schedule`, unless `schedule` gives the values
    after each number of agent-steps (a chunk of a longer run). `optimizer` continues an
    optimizer over `policy` (default: a fresh `cfg.optimizer`). `on_update(k, stats)` runs after
    update k (1-based). All randomness comes from `seed`, none from global state.
    """
    cfg.validate()
    hyper = hyper or Hyper.of(cfg)
    if hyper.learning_rate <= 0:
        raise ValueError(f"learning_rate must be > 0, got {hyper.learning_rate}")
    start = time.perf_counter()
    timers = timers or NullTimers()
    generator = torch.Generator().manual_seed(seed)
    if stats_channel is not None:
        stats_channel.get_and_reset_stats()
    collector = Collector(env, BEHAVIOR_NAME, policy, generator, cfg.time_horizon, timers)
    if optimizer is None:
        optimizer = make_optimizer(policy, hyper.learning_rate, cfg.optimizer)
    start_hyper = hyper
    schedule = schedule or (lambda steps: start_hyper.after(cfg, steps, cfg.max_steps))
    history, steps = run_updates(
        collector, policy, optimizer, cfg, schedule, generator, timers, on_update
    )
    success = _success(stats_channel)
    return _summary(history, collector.episodes, success, steps, time.perf_counter() - start)


class Collecting(Protocol):
    """What run_updates needs of a collector: its agents, device and rollouts."""

    @property
    def num_agents(self) -> int:
        """Agents stepped per environment step."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the policy acts."""
        ...

    def collect(self, steps: int) -> Rollout:
        """The next `steps` steps of every agent."""
        ...


def run_updates(
    collector: Collecting,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    cfg: PPOConfig,
    schedule: Schedule,
    generator: torch.Generator,
    timers: Timers,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[list[dict[str, float]], int]:
    """Collect a buffer and update, until cfg.max_steps agent-steps; the updates and the steps."""
    horizon = max(math.ceil(cfg.buffer_size / collector.num_agents), 1)
    worker, update_threads = _update_threads(collector.device)
    steps, history = 0, []
    try:
        while steps < cfg.max_steps:
            current = schedule(steps)
            rollout = collector.collect(horizon)
            steps += rollout.num_steps
            with timers.scope("update"), torch_threads(update_threads):
                if policy.normalize:
                    obs = rollout.obs.reshape(rollout.num_steps, -1)
                    policy.normalizer.update(obs.to(collector.device))
                    rollout = revalued(rollout, policy)
                update = ppo_update(policy, optimizer, rollout, cfg, current, generator, worker)
            history.append(update)
            if on_update is not None:
                on_update(len(history), update)
    finally:
        if worker is not None:
            worker.shutdown()
    return history, steps


def _update_threads(device: torch.device) -> tuple[ThreadPoolExecutor | None, int]:
    """On CPU each half of the loss runs on one torch thread, side by side if torch may use 2+.

    Two single-threaded halves beat one two-threaded loss here (no per-kernel thread hand-off,
    half the working set per core) and degrade gracefully when another process takes a core.
    """
    if device.type != "cpu":
        return None, torch.get_num_threads()
    return (ThreadPoolExecutor(1) if torch.get_num_threads() >= 2 else None), 1


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
    is copied, never changed. `schedule` as in `train`. A game of teams trains with the ghost
    trainer (cfg.self_play): `self_play_state` gives the run's ELO and, to continue one, the
    ghost; other tasks pass it through unchanged.
    """
    policy = policy_for(env, network).to(device)
    policy.load_state_dict(weights)
    optimizer = make_optimizer(policy, (hyper or Hyper.of(cfg)).learning_rate, cfg.optimizer)
    if optimizer_state is not None:
        # load_state_dict keeps tensors already on the right device: copy, as Adam steps in place
        optimizer.load_state_dict(copy.deepcopy(optimizer_state))
    if is_game(env, cfg):
        from meta.algorithm.selfplay.trainer import game_train

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
    from envs.tasks.teams import team_of

    teams = [name for name in env.behavior_specs if team_of(name) is not None]
    if teams and cfg.self_play is None:
        raise ValueError(
            f"behaviors {', '.join(teams)} have team ids but ppo.self_play is not set: "
            "a game of teams trains with self-play (add ppo.self_play, e.g. ppo=selfplay)"
        )
    return bool(teams)


def optimizer_cpu_state(optimizer: torch.optim.Optimizer) -> OptimizerState:
    """A CPU copy of the optimizer's state_dict (what a checkpoint stores)."""
    state = copy.deepcopy(optimizer.state_dict())
    for slots in state["state"].values():
        for name, value in slots.items():
            if isinstance(value, torch.Tensor):
                slots[name] = value.detach().to("cpu")
    return state


def cpu_weights(policy: Policy) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the policy's state_dict."""
    return {k: v.detach().to("cpu", copy=True) for k, v in policy.state_dict().items()}


def policy_for(env: AgentEnvironment, network: NetworkConfig, seed: int = 0) -> Policy:
    """A fresh policy sized for the env's (single) behavior."""
    spec = next(iter(env.behavior_specs.values()))
    return make_policy(
        spec.observation_specs[0].shape[0], spec.action_spec.continuous_size, network, seed
    )


def _success(stats_channel: StatsSideChannel | None) -> float:
    """Mean of the success stat the env reported since the training began (NaN if none)."""
    if stats_channel is None:
        return float("nan")
    values = [v for v, _ in stats_channel.get_and_reset_stats().get(SUCCESS_STAT, [])]
    return float(np.mean(values)) if values else float("nan")


def _summary(
    history: list[dict[str, float]], episodes: EpisodeLog, success: float, steps: int, wall: float
) -> dict[str, float]:
    """Mean update statistics, episode returns and lengths, counts, wall time and success."""
    stats = {key: float(np.mean([h[key] for h in history])) for key in history[0]}
    stats.update(
        {
            "Environment/Cumulative Reward": _mean(episodes.returns),
            "Environment/Episode Length": _mean(episodes.lengths),
            "episodes": float(len(episodes.returns)),
            "steps": float(steps),
            "updates": float(len(history)),
            "wall_time_s": wall,
            SUCCESS_STAT: success,
        }
    )
    return stats


def _mean(values: list[float] | list[int]) -> float:
    return float(np.mean(values)) if values else float("nan")
