"""k training requests in lockstep: one stacked policy acts for k collectors, one update for all.

Each member keeps its own environment, random stream (its request's seed: the same
minibatch orders and action noise as alone), losses, gradient-norm clip, learning rate, beta
and epsilon schedules, Adam state and normaliser. The environments step one after the other
(each batched over its areas); every forward, backward and optimizer step is one for all k.

What it gives equals the sequential runner's (meta.algorithm.training) up to rounding: the
batched matrix products and the optimizer's arithmetic round differently from `addmm` and the
fused Adam kernel, and a rounding difference grows over a training as any perturbation does
(tests/algorithm/test_stacked.py measures it). Requests it cannot stack run alone: see
`stackable`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import torch

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.policy import gaussian_log_prob
from meta.algorithm.ppo.rollout import Collector, NullTimers, Rollout, Timers, next_state_values
from meta.algorithm.ppo.train import _success, summary
from meta.algorithm.ppo.update import compute_gae, explained_variance
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.stacked.network import StackedPolicy
from meta.algorithm.stacked.optim import StackedOptimizer, clip_grad_norms
from meta.algorithm.training import _with_meta_gradient, start_policy
from meta.observe.tags import (
    APPROX_KL,
    BETA,
    CLIP_FRACTION,
    ENTROPY,
    EPSILON,
    EXPLAINED_VARIANCE,
    LEARNING_RATE,
    POLICY_LOSS,
    VALUE_LOSS,
)


def stackable(request: TrainRequest) -> str | None:
    """Why the request trains alone (None: it can be stacked)."""
    if request.ppo.self_play is not None:
        return "a game of teams trains with the ghost trainer"
    if request.optimizer_state is not None or request.returns_optimizer:
        return "it continues Adam's state from another training"
    if request.schedule is not None:
        return "it is a chunk of a longer run"
    if request.ppo.ratio == "per_dimension":
        return "ppo.ratio=per_dimension"
    if len(request.tasks) != 1:
        return "its areas are split across several tasks"
    return None


def same_shape(a: TrainRequest, b: TrainRequest) -> bool:
    """Whether two stackable requests can train in one stack (the same settings and device)."""
    return (a.ppo, a.network, a.device, a.updates) == (b.ppo, b.network, b.device, b.updates)


def train_stacked(
    requests: Sequence[TrainRequest],
    envs: Sequence[AgentEnvironment],
    timers: Timers | None = None,
) -> list[TrainResult]:
    """Train every request on its environment, all k in lockstep; results in order."""
    started = time.perf_counter()
    timers = timers or NullTimers()
    first = requests[0]
    cfg, network, device = first.ppo, first.network, first.device
    cfg.validate()
    starts = [start_policy(r, env) for r, env in zip(requests, envs, strict=True)]
    *_, mean_layer = (m for m in starts[0].actor if isinstance(m, torch.nn.Linear))
    policy = StackedPolicy(
        [cpu_weights(p) for p in starts], network.normalize, network.normalizer_epsilon, device
    )
    scaled = [
        policy.params[f"actor.{_index(starts[0], mean_layer)}.{n}"] for n in ("weight", "bias")
    ]
    optimizer = StackedOptimizer(
        policy.parameters(), cfg.optimizer, cfg.adam_epsilon, scaled, cfg.action_scale
    )
    generators = [torch.Generator().manual_seed(r.seed) for r in requests]
    channels = [getattr(env, "stats_channel", None) for env in envs]
    for channel in channels:
        if channel is not None:
            channel.get_and_reset_stats()
    collectors = [
        Collector(env, BEHAVIOR_NAME, start, g, cfg.time_horizon, timers)
        for env, start, g in zip(envs, starts, generators, strict=True)
    ]
    if len({c.num_agents for c in collectors}) != 1:
        raise ValueError("stacked trainings need the same number of agents in every environment")
    hypers = [r.hyper or Hyper.of(cfg) for r in requests]
    horizon = max(-(-cfg.buffer_size // collectors[0].num_agents), 1)
    histories: list[list[dict[str, float]]] = [[] for _ in requests]
    snapshots: list[dict[int, dict[str, torch.Tensor]]] = [
        {0: policy.weights(i)} if 0 in r.snapshots else {} for i, r in enumerate(requests)
    ]
    steps = 0
    while steps < cfg.max_steps if first.updates is None else len(histories[0]) < first.updates:
        current = [h.after(cfg, steps, cfg.max_steps) for h in hypers]
        rollouts = _collect(policy, collectors, generators, horizon, timers)
        steps += rollouts[0].num_steps
        if cfg.schedule_timing == "after_buffer":
            current = [h.after(cfg, steps, cfg.max_steps) for h in hypers]
        with timers.scope("update"):
            stats = _update(policy, optimizer, rollouts, cfg, current, generators)
        for i, update in enumerate(stats):
            histories[i].append(update)
            if len(histories[i]) in requests[i].snapshots:
                snapshots[i][len(histories[i])] = policy.weights(i)
    wall = time.perf_counter() - started
    results = []
    for i, request in enumerate(requests):
        stats = summary(histories[i], collectors[i].episodes, _success(channels[i]), steps, wall)
        result = TrainResult(policy.weights(i), stats, histories[i], snapshots=snapshots[i])
        if request.meta_gradient:
            with timers.scope("meta_gradient"):
                result = _with_meta_gradient(request, envs[i], result)
        results.append(result)
    return results


def _index(policy: torch.nn.Module, layer: torch.nn.Module) -> str:
    """The name of `layer` within the policy's actor."""
    return next(name for name, m in policy.actor.named_children() if m is layer)  # type: ignore[union-attr]


def _collect(
    policy: StackedPolicy,
    collectors: list[Collector],
    generators: list[torch.Generator],
    steps: int,
    timers: Timers,
) -> list[Rollout]:
    """One buffer of every collector, the stacked policy acting for all at each step."""
    stepping = [
        c.stepping(steps, lambda obs, i=i: policy.member_value(i, obs))
        for i, c in enumerate(collectors)
    ]
    obs = [next(s) for s in stepping]
    rollouts: list[Rollout] = []
    device = collectors[0].device
    while not rollouts:
        with timers.scope("policy_forward"):
            actions, log_probs, values = policy.act(torch.stack(obs).to(device), generators)
        for i, s in enumerate(stepping):
            try:
                obs[i] = s.send((actions[i], log_probs[i], values[i]))
            except StopIteration as done:
                rollouts.append(done.value)
    return rollouts


def _revalued(
    policy: StackedPolicy, rollouts: list[Rollout], device: torch.device
) -> list[Rollout]:
    """Every buffer's values estimated again with its member's updated normaliser."""
    out = []
    steps, n = rollouts[0].rewards.shape
    every = torch.stack(
        [torch.cat([r.obs.reshape(steps * n, -1), r.bootstrap.last_obs]) for r in rollouts]  # type: ignore[union-attr]
    ).to(device)
    with torch.no_grad():
        values = policy.value_from(policy.features(every)).cpu()
    for i, r in enumerate(rollouts):
        b = r.bootstrap
        assert b is not None
        member = values[i].reshape(steps + 1, n)
        next_values = next_state_values(
            lambda obs, i=i: policy.member_value(i, obs), member, b.ended, b.pieces, device
        )
        out.append(replace(r, values=member[:-1], next_values=next_values))
    return out


def _update(
    policy: StackedPolicy,
    optimizer: StackedOptimizer,
    rollouts: list[Rollout],
    cfg: PPOConfig,
    hypers: list[Hyper],
    generators: list[torch.Generator],
) -> list[dict[str, float]]:
    """One PPO update of every member on its buffer; each member's statistics."""
    k = len(rollouts)
    device = policy.params["log_std"].device
    steps, n = rollouts[0].rewards.shape
    total = steps * n
    obs = torch.stack([r.obs.reshape(total, -1) for r in rollouts]).to(device)
    if policy.normalize:
        policy.update_normalizer(obs, cfg.normalizer_prior)
        rollouts = _revalued(policy, rollouts, device)
    lr = torch.tensor([h.learning_rate for h in hypers], device=device)
    beta = torch.tensor([h.beta for h in hypers], device=device)
    eps = torch.tensor([h.epsilon for h in hypers], device=device)
    columns = {
        name: torch.stack([getattr(r, name) for r in rollouts])
        for name in ("rewards", "values", "next_values", "boundaries")
    }
    # GAE runs over time for all members at once: (T, k, n)
    gae = [
        columns[name].transpose(0, 1) for name in ("rewards", "values", "next_values", "boundaries")
    ]
    advantages, returns = compute_gae(*gae, cfg.gamma, cfg.lambd)
    with torch.no_grad():
        features = policy.features(obs)
    buffer = {
        "features": features,
        "actions": torch.stack([r.actions.reshape(total, -1) for r in rollouts]).to(device),
        "old_log_probs": torch.stack([r.log_probs.reshape(total) for r in rollouts]).to(device),
        "old_values": columns["values"].reshape(k, total).to(device),
        "advantages": advantages.transpose(0, 1).reshape(k, total).to(device),
        "returns": returns.transpose(0, 1).reshape(k, total).to(device),
    }
    if cfg.advantage_normalization == "buffer":
        std, mean = torch.std_mean(buffer["advantages"], dim=1, correction=0, keepdim=True)
        buffer["advantages"] = (buffer["advantages"] - mean) / (std + 1e-10)
    sums = torch.zeros(5, k, device=device)
    count = 0
    batch_size = cfg.batch_size
    num_batches = max(total // batch_size, 1)
    for _ in range(cfg.num_epoch):
        order = torch.stack([torch.randperm(total, generator=g) for g in generators]).to(device)
        shuffled = {name: _gathered(x, order) for name, x in buffer.items()}
        for b in range(num_batches):
            batch = {
                name: x[:, b * batch_size : (b + 1) * batch_size] for name, x in shuffled.items()
            }
            if cfg.advantage_normalization != "buffer":
                std, mean = torch.std_mean(batch["advantages"], dim=1, keepdim=True)
                batch["advantages"] = (batch["advantages"] - mean) / (std + 1e-8)
            sums += _gradient_step(policy, optimizer, batch, cfg, lr, beta, eps)
            count += 1
    means = (sums / count).cpu().tolist()
    out = []
    for i, r in enumerate(rollouts):
        policy_loss, value_loss, entropy, approx_kl, clip_fraction = (row[i] for row in means)
        out.append(
            {
                POLICY_LOSS: policy_loss,
                VALUE_LOSS: value_loss,
                ENTROPY: entropy,
                LEARNING_RATE: hypers[i].learning_rate,
                BETA: hypers[i].beta,
                EPSILON: hypers[i].epsilon,
                APPROX_KL: approx_kl,
                CLIP_FRACTION: clip_fraction,
                EXPLAINED_VARIANCE: explained_variance(r.values, returns[:, i]),
            }
        )
    return out


def _gathered(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Rows of each member's (k, N, ...) in its own order (k, N)."""
    index = order.view(*order.shape, *([1] * (x.ndim - 2))).expand(*order.shape, *x.shape[2:])
    return torch.gather(x, 1, index)


def _gradient_step(
    policy: StackedPolicy,
    optimizer: StackedOptimizer,
    batch: dict[str, torch.Tensor],
    cfg: PPOConfig,
    lr: torch.Tensor,
    beta: torch.Tensor,
    eps: torch.Tensor,
) -> torch.Tensor:
    """One minibatch step of every member; (policy loss, value loss, entropy, KL, clip) x k."""
    optimizer.zero_grad()
    x = batch["features"]
    mean = policy.mean_from(x)
    log_probs = gaussian_log_prob(batch["actions"], mean, policy.log_std[:, None])
    log_ratio = log_probs - batch["old_log_probs"]
    ratio = torch.exp(log_ratio)
    low, high = (1.0 - eps)[:, None], (1.0 + eps)[:, None]
    adv = batch["advantages"]
    policy_loss = -torch.min(ratio * adv, torch.clamp(ratio, low, high) * adv).mean(1)
    entropy = policy.entropy(cfg.entropy == "mean")
    values = policy.value_from(x)
    old = batch["old_values"]
    clipped = old + torch.clamp(values - old, -eps[:, None], eps[:, None])
    returns = batch["returns"]
    value_loss = torch.max((returns - values).square(), (returns - clipped).square()).mean(1)
    (policy_loss - beta * entropy + cfg.value_coef * value_loss).sum().backward()
    clip_grad_norms(policy.parameters(), cfg.max_grad_norm)
    optimizer.step(lr)
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean(1)
        clip_fraction = ((ratio - 1.0).abs() > eps[:, None]).float().mean(1)
        shown = policy_loss.abs() if cfg.policy_loss_stat == "absolute" else policy_loss
        return torch.stack([shown, value_loss, entropy, approx_kl, clip_fraction]).detach()
