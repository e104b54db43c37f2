"""Inner PPO with ML-Agents semantics: one training from given weights as a function."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.policy import Policy, make_policy
from meta.algorithm.ppo.rollout import Collector, EpisodeLog, NullTimers, Timers
from meta.algorithm.ppo.update import ppo_update
from meta.runtime.threads import torch_threads

__all__ = [
    "SUCCESS_STAT",
    "Hyper",
    "InnerResult",
    "cpu_weights",
    "inner_train",
    "policy_for",
    "train",
]

SUCCESS_STAT = "Environment/Success"


@dataclass
class InnerResult:
    """What one inner training produced."""

    weights: dict[str, torch.Tensor]
    stats: dict[str, float]
    updates: list[dict[str, float]] = field(default_factory=list)


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
) -> dict[str, float]:
    """Train `policy` in place with a fresh optimizer for cfg.max_steps agent-steps; return stats.

    `hyper` gives the starting learning rate, beta and epsilon (the outer loop anneals them);
    within the training each follows its `*_schedule`. `on_update(k, stats)` runs after
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
    horizon = max(math.ceil(cfg.buffer_size / collector.num_agents), 1)
    optimizer = make_optimizer(policy, hyper.learning_rate)
    worker, update_threads = _update_threads(collector.device)
    steps, history = 0, []
    try:
        while steps < cfg.max_steps:
            current = hyper.after(cfg, steps, cfg.max_steps)
            rollout = collector.collect(horizon)
            steps += rollout.num_steps
            with timers.scope("update"), torch_threads(update_threads):
                if policy.normalize:
                    obs = rollout.obs.reshape(rollout.num_steps, -1)
                    policy.normalizer.update(obs.to(collector.device))
                update = ppo_update(policy, optimizer, rollout, cfg, current, generator, worker)
            history.append(update)
            if on_update is not None:
                on_update(len(history), update)
    finally:
        if worker is not None:
            worker.shutdown()
    success = _success(stats_channel)
    return _summary(history, collector.episodes, success, steps, time.perf_counter() - start)


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
) -> InnerResult:
    """One inner training from `weights`; returns the trained weights and the statistics."""
    policy = policy_for(env, network).to(device)
    policy.load_state_dict(weights)
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
    )
    return InnerResult(cpu_weights(policy), stats, updates)


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
