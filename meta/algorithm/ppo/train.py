"""Inner PPO with ML-Agents semantics: one training of a policy, and the update loop it runs.

`run_updates` (collect a buffer, update, repeat) and `summary` serve the ghost trainer too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.optim import Optimizer
from meta.algorithm.ppo.pieces import PieceCollector
from meta.algorithm.ppo.policy import Policy, make_policy
from meta.algorithm.ppo.rollout import (
    Collector,
    EpisodeLog,
    NullTimers,
    Rollout,
    Timers,
    revalued,
)
from meta.algorithm.ppo.update import dimension_log_probs, ppo_update
from meta.observe.tags import CUMULATIVE_REWARD, EPISODE_LENGTH, SUCCESS
from meta.runtime.allocator import keep_freed_memory
from meta.runtime.threads import torch_threads

__all__ = [
    "Collecting",
    "Hyper",
    "PPORun",
    "Schedule",
    "policy_for",
    "run_updates",
    "summary",
    "train",
]

STEPS = "steps"
"""An update's agent-steps of its training so far (with the buffer's)."""
Schedule = Callable[[int], Hyper]
"""The learning rate, beta and epsilon after a number of agent-steps of the training."""
OnUpdate = Callable[[int, dict[str, float]], None]
"""Told of update k (1-based) and its statistics."""


@dataclass
class PPORun:
    """One training of `policy` in place: what PPO and the ghost trainer both read.

    `hyper` gives the starting learning rate, beta and epsilon (the outer loop anneals them);
    within the training each follows its `*_schedule`, unless `schedule` gives the values
    after each number of agent-steps (a chunk of a longer run). `optimizer` continues an
    optimizer over `policy` (default: a fresh `cfg.optimizer`). `on_update(k, stats)` runs after
    update k (1-based). All randomness comes from `seed`, none from global state.
    """

    env: AgentEnvironment
    policy: Policy
    cfg: PPOConfig
    seed: int
    hyper: Hyper | None = None
    optimizer: Optimizer | None = None
    schedule: Schedule | None = None
    stats_channel: StatsSideChannel | None = None
    timers: Timers = field(default_factory=NullTimers)
    on_update: OnUpdate | None = None
    updates: int | None = None
    """Stop after this many updates (None: at cfg.max_steps agent-steps)."""

    def begin(self) -> tuple[Optimizer, Schedule, torch.Generator]:
        """Check the settings, clear the env's stats; the optimizer, schedule and generator."""
        self.cfg.validate()
        start = self.hyper or Hyper.of(self.cfg)
        if start.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {start.learning_rate}")
        if self.stats_channel is not None:
            self.stats_channel.get_and_reset_stats()
        optimizer = self.optimizer or make_optimizer(
            self.policy,
            start.learning_rate,
            self.cfg.optimizer,
            self.cfg.adam_epsilon,
            self.cfg.action_scale,
        )
        cfg = self.cfg
        schedule = self.schedule or (lambda steps: start.after(cfg, steps, cfg.max_steps))
        return optimizer, schedule, torch.Generator().manual_seed(self.seed)


def train(run: PPORun) -> dict[str, float]:
    """Train `run.policy` in place for cfg.max_steps agent-steps; return stats."""
    started = time.perf_counter()
    optimizer, schedule, generator = run.begin()
    cfg, timers = run.cfg, run.timers
    collector = Collector(run.env, BEHAVIOR_NAME, run.policy, generator, cfg.time_horizon, timers)
    assembled = (
        PieceCollector(collector, run.policy, cfg) if cfg.buffer_assembly == "pieces" else collector
    )
    successes = SuccessLog(run.stats_channel)
    history, steps = run_updates(
        assembled,
        run.policy,
        optimizer,
        cfg,
        schedule,
        generator,
        timers,
        run.on_update,
        run.updates,
        successes,
    )
    success = successes.overall()
    return summary(history, collector.episodes, success, steps, time.perf_counter() - started)


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

    @property
    def episodes(self) -> EpisodeLog:
        """The episodes finished so far."""
        ...

    def collect(self, steps: int) -> Rollout:
        """The next `steps` steps of every agent."""
        ...


def buffer_stats(
    episodes: EpisodeLog, before: int, steps: int, successes: SuccessLog | None
) -> dict[str, float]:
    """An update's learning-curve point: the agent-steps of its training so far, the mean
    return and success of the episodes finished during its buffer (NaN: none), as ML-Agents'
    summaries are of the steps since the last."""
    success = float("nan") if successes is None else successes.buffer()
    return {
        STEPS: float(steps),
        CUMULATIVE_REWARD: _mean(episodes.returns[before:]),
        SUCCESS: success,
    }


def run_updates(
    collector: Collecting,
    policy: Policy,
    optimizer: Optimizer,
    cfg: PPOConfig,
    schedule: Schedule,
    generator: torch.Generator,
    timers: Timers,
    on_update: OnUpdate | None = None,
    updates: int | None = None,
    successes: SuccessLog | None = None,
) -> tuple[list[dict[str, float]], int]:
    """Collect a buffer and update, until cfg.max_steps agent-steps (or `updates` updates);
    the updates and the steps.

    Each update reads `schedule` before its buffer is collected, or after its steps are counted
    (`schedule_timing=after_buffer`, as ML-Agents reads `policy.get_current_step()`).
    """
    keep_freed_memory()
    horizon = max(math.ceil(cfg.buffer_size / collector.num_agents), 1)
    by_pieces = isinstance(collector, PieceCollector)
    # each piece taken into the normaliser and valued as it completes
    valued = isinstance(collector, PieceCollector) and collector.values_pieces
    worker, update_threads = _update_threads(collector.device)
    steps, history = 0, list[dict[str, float]]()
    try:
        while steps < cfg.max_steps if updates is None else len(history) < updates:
            current = schedule(steps)
            before = len(collector.episodes.returns)
            rollout = collector.collect(horizon)
            steps += rollout.num_steps
            if cfg.schedule_timing == "after_buffer":
                current = schedule(steps)
            with timers.scope("update"), torch_threads(update_threads):
                if cfg.ratio == "per_dimension" and not by_pieces:
                    rollout = dimension_log_probs(policy, rollout)  # pieces: as they were acted
                if policy.normalize and not valued:
                    policy.normalizer.prime(cfg.normalizer_prior)
                    obs = rollout.buffer_rows(rollout.obs)
                    policy.normalizer.update(obs.to(collector.device))
                if (policy.normalize or by_pieces) and not valued:
                    # pieces: what an agent began before the last update was valued by the
                    # policy before it; ML-Agents values a piece once it is complete
                    rollout = revalued(rollout, policy)
                update = ppo_update(policy, optimizer, rollout, cfg, current, generator, worker)
            update.update(buffer_stats(collector.episodes, before, steps, successes))
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


def policy_for(env: AgentEnvironment, network: NetworkConfig, seed: int = 0) -> Policy:
    """A fresh policy sized for the env's (single) behavior."""
    spec = next(iter(env.behavior_specs.values()))
    return make_policy(
        spec.observation_specs[0].shape[0], spec.action_spec.continuous_size, network, seed
    )


class SuccessLog:
    """The success stat an environment reports, read buffer by buffer (NaN where none)."""

    def __init__(self, channel: StatsSideChannel | None) -> None:
        self.channel = channel
        self.values: list[float] = []

    def buffer(self) -> float:
        """The success of the episodes reported since the last read."""
        if self.channel is None:
            return float("nan")
        new = [v for v, _ in self.channel.get_and_reset_stats().get(SUCCESS, [])]
        self.values.extend(new)
        return _mean(new)

    def overall(self) -> float:
        """The success of every episode reported since the training began."""
        self.buffer()
        return _mean(self.values)


def summary(
    history: list[dict[str, float]], episodes: EpisodeLog, success: float, steps: int, wall: float
) -> dict[str, float]:
    """Mean update statistics, episode returns and lengths, counts, wall time and success."""
    stats = {key: float(np.mean([h[key] for h in history])) for key in history[0]}
    stats.update(
        {
            CUMULATIVE_REWARD: _mean(episodes.returns),
            EPISODE_LENGTH: _mean(episodes.lengths),
            "episodes": float(len(episodes.returns)),
            "steps": float(steps),
            "updates": float(len(history)),
            "wall_time_s": wall,
            SUCCESS: success,
        }
    )
    return stats


def _mean(values: list[float] | list[int]) -> float:
    return float(np.mean(values)) if values else float("nan")
