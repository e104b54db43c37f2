"""Inner PPO with ML-Agents' semantics: one training from given weights as a function."""

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
from meta.algorithm.ppo.flat_adam import FlatAdam
from meta.algorithm.ppo.loss import (
    Minibatch,
    clipped_policy_loss,
    clipped_value_loss,
    gradient_step,
)
from meta.algorithm.ppo.policy import Policy, make_policy
from meta.algorithm.ppo.rollout import Collector, NullTimers, Rollout, Timers
from meta.algorithm.schedules import BETA_FLOOR, EPSILON_FLOOR, LEARNING_RATE_FLOOR, decayed
from meta.config import NetworkConfig, PPOConfig
from meta.runtime.threads import torch_threads

__all__ = [
    "SUCCESS_STAT",
    "Hyper",
    "InnerResult",
    "clipped_policy_loss",
    "clipped_value_loss",
    "compute_gae",
    "cpu_weights",
    "inner_train",
    "policy_for",
    "ppo_update",
    "train",
]

SUCCESS_STAT = "Environment/Success"


@dataclass(frozen=True)
class Hyper:
    """Starting values of the scheduled hyperparameters for one training."""

    learning_rate: float
    beta: float
    epsilon: float

    @classmethod
    def of(cls, cfg: PPOConfig) -> Hyper:
        """The config's own values."""
        return cls(cfg.learning_rate, cfg.beta, cfg.epsilon)


@dataclass
class InnerResult:
    """What one inner training produced."""

    weights: dict[str, torch.Tensor]
    stats: dict[str, float]
    updates: list[dict[str, float]] = field(default_factory=list)


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    boundaries: torch.Tensor,
    gamma: float,
    lambd: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over time-major (T, n) tensors; returns (adv, returns).

    delta_t = r_t + gamma * next_values_t - V_t, and A_t = delta_t + gamma * lambd * A_{t+1}
    unless the trajectory stops after t. `next_values` already holds the right bootstrap:
    V(s_{t+1}) inside a trajectory and where it was cut at the time horizon, V(final state)
    where the episode timed out (max_step is not a failure), and 0 where the task ended it.
    """
    deltas = rewards + gamma * next_values - values
    carry = gamma * lambd * (1.0 - boundaries)
    advantages = deltas.clone()
    for t in range(deltas.shape[0] - 2, -1, -1):
        torch.addcmul(deltas[t], carry[t], advantages[t + 1], out=advantages[t])
    return advantages, advantages + values


def ppo_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer | FlatAdam,
    rollout: Rollout,
    cfg: PPOConfig,
    hyper: Hyper,
    generator: torch.Generator,
    worker: ThreadPoolExecutor | None = None,
) -> dict[str, float]:
    """num_epoch passes of minibatch updates over one buffer; returns mean losses.

    With a `worker` thread the actor's and the critic's halves of each step run side by side.
    """
    advantages, returns = compute_gae(
        rollout.rewards,
        rollout.values,
        rollout.next_values,
        rollout.boundaries,
        cfg.gamma,
        cfg.lambd,
    )
    n = rollout.num_steps
    device = next(policy.parameters()).device
    with torch.no_grad():
        # The normaliser only moves between updates: normalise the buffer once.
        features = policy.features(rollout.obs.reshape(n, -1).to(device))
    columns = [
        x.reshape(n, *x.shape[2:]).to(device)
        for x in (rollout.actions, rollout.log_probs, rollout.values, advantages, returns)
    ]
    for group in optimizer.param_groups:
        group["lr"] = hyper.learning_rate
    sums = np.zeros(3)
    count = 0
    num_batches = max(n // cfg.batch_size, 1)
    for _ in range(cfg.num_epoch):
        order = torch.randperm(n, generator=generator).to(device)
        # Gather once per epoch; minibatches are then contiguous slices.
        shuffled = [x.index_select(0, order) for x in (features, *columns)]
        for b in range(num_batches):
            rows = slice(b * cfg.batch_size, (b + 1) * cfg.batch_size)
            x, actions, old_lp, old_v, adv, ret = (column[rows] for column in shuffled)
            std, mean = torch.std_mean(adv)
            batch = Minibatch(x, actions, old_lp, old_v, (adv - mean) / (std + 1e-8), ret)
            sums += gradient_step(policy, optimizer, batch, cfg, hyper.epsilon, hyper.beta, worker)
            count += 1
    policy_loss, value_loss, entropy = sums / count
    return {
        "Losses/Policy Loss": policy_loss,
        "Losses/Value Loss": value_loss,
        "Policy/Entropy": entropy,
        "Policy/Learning Rate": hyper.learning_rate,
        "Policy/Beta": hyper.beta,
        "Policy/Epsilon": hyper.epsilon,
    }


def train(
    env: AgentEnvironment,
    policy: Policy,
    cfg: PPOConfig,
    *,
    seed: int,
    behavior: str = BEHAVIOR_NAME,
    hyper: Hyper | None = None,
    max_steps: int | None = None,
    stats_channel: StatsSideChannel | None = None,
    timers: Timers | None = None,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Train `policy` in place with a fresh optimizer for `max_steps` agent-steps; return stats.

    `hyper` gives the starting learning rate, beta and epsilon (the outer loop anneals them);
    within the training each follows its `*_schedule`. `on_update(k, stats)` runs after
    update k (1-based). All randomness comes from `seed`, none from global state.
    """
    cfg.validate()
    budget = cfg.max_steps if max_steps is None else max_steps
    if budget <= 0:
        raise ValueError(f"max_steps must be > 0, got {budget}")
    hyper = hyper or Hyper.of(cfg)
    if hyper.learning_rate <= 0:
        raise ValueError(f"learning_rate must be > 0, got {hyper.learning_rate}")
    start = time.perf_counter()
    timers = timers or NullTimers()
    generator = torch.Generator().manual_seed(seed)
    if stats_channel is not None:
        stats_channel.get_and_reset_stats()
    collector = Collector(env, behavior, policy, generator, cfg.time_horizon, timers)
    horizon = max(math.ceil(cfg.buffer_size / collector.num_agents), 1)
    optimizer = FlatAdam(policy.parameters(), lr=hyper.learning_rate, eps=1e-7)
    worker, update_threads = _update_threads(collector.device)
    steps, history = 0, []
    try:
        while steps < budget:
            current = _scheduled(cfg, hyper, steps, budget)
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
        optimizer.release()
        if worker is not None:
            worker.shutdown()
    return _summary(history, collector, stats_channel, steps, time.perf_counter() - start)


def _update_threads(device: torch.device) -> tuple[ThreadPoolExecutor | None, int]:
    """On CPU each half of the loss runs on one torch thread, side by side if torch may use 2+.

    Two single-threaded halves beat one two-threaded loss here (no per-kernel thread hand-off,
    half the working set per core) and degrade gracefully when another process takes a core.
    """
    if device.type != "cpu":
        return None, torch.get_num_threads()
    return (ThreadPoolExecutor(1) if torch.get_num_threads() >= 2 else None), 1


def _scheduled(cfg: PPOConfig, hyper: Hyper, steps: int, budget: int) -> Hyper:
    """The hyperparameters after `steps` of `budget` agent-steps, per their schedules."""
    return Hyper(
        decayed(
            cfg.learning_rate_schedule, hyper.learning_rate, LEARNING_RATE_FLOOR, steps, budget
        ),
        decayed(cfg.beta_schedule, hyper.beta, BETA_FLOOR, steps, budget),
        decayed(cfg.epsilon_schedule, hyper.epsilon, EPSILON_FLOOR, steps, budget),
    )


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
    new_weights = cpu_weights(policy)
    return InnerResult(new_weights, stats, updates)


def cpu_weights(policy: Policy) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the policy's state_dict."""
    return {k: v.detach().to("cpu", copy=True) for k, v in policy.state_dict().items()}


def policy_for(env: AgentEnvironment, network: NetworkConfig, seed: int = 0) -> Policy:
    """A fresh policy sized for the env's (single) behavior."""
    spec = next(iter(env.behavior_specs.values()))
    return make_policy(
        spec.observation_specs[0].shape[0], spec.action_spec.continuous_size, network, seed
    )


def _summary(
    history: list[dict[str, float]],
    collector: Collector,
    stats_channel: StatsSideChannel | None,
    steps: int,
    wall: float,
) -> dict[str, float]:
    episodes = collector.episodes
    stats = {key: float(np.mean([h[key] for h in history])) for key in history[0]}
    stats.update(
        {
            "Environment/Cumulative Reward": float(np.mean(episodes.returns))
            if episodes.returns
            else float("nan"),
            "Environment/Episode Length": float(np.mean(episodes.lengths))
            if episodes.lengths
            else float("nan"),
            "episodes": float(len(episodes.returns)),
            "steps": float(steps),
            "updates": float(len(history)),
            "wall_time_s": wall,
        }
    )
    success = float("nan")
    if stats_channel is not None:
        values = [v for v, _ in stats_channel.get_and_reset_stats().get(SUCCESS_STAT, [])]
        success = float(np.mean(values)) if values else float("nan")
    stats[SUCCESS_STAT] = success
    return stats
