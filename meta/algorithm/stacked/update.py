"""One PPO update of k stacked members, each on its own buffer, every step one for all k."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache, partial

import torch

from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.policy import gaussian_log_prob
from meta.algorithm.ppo.rollout import Rollout, next_state_values
from meta.algorithm.ppo.update import compute_gae, explained_variance
from meta.algorithm.stacked.network import StackedPolicy, pieces
from meta.algorithm.stacked.optim import StackedOptimizer, clip_grad_norms
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

PIECE = 8
"""Members per forward and backward of a gradient step: more spill the cache (at 64 units and
batches of 1,024 a step of 32 members took 59 ms in one piece, 48 ms in four)."""


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
        values = policy.values(every).cpu()
    for i, r in enumerate(rollouts):
        b = r.bootstrap
        assert b is not None
        member = values[i].reshape(steps + 1, n)
        next_values = next_state_values(
            partial(policy.member_value, i), member, b.ended, b.pieces, device
        )
        out.append(replace(r, values=member[:-1], next_values=next_values))
    return out


def stacked_update(
    policy: StackedPolicy,
    optimizer: StackedOptimizer,
    rollouts: list[Rollout],
    cfg: PPOConfig,
    hypers: list[Hyper],
    generators: list[torch.Generator],
    compiled: bool = False,
) -> list[dict[str, float]]:
    """One PPO update of every member on its buffer; each member's statistics (`compiled`:
    the losses and their backward as torch.compile's kernels, see `compiled_losses`)."""
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
    rewards, values, next_values, boundaries = (
        columns[name].transpose(0, 1) for name in ("rewards", "values", "next_values", "boundaries")
    )
    advantages, returns = compute_gae(
        rewards, values, next_values, boundaries, cfg.gamma, cfg.lambd
    )
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
    losses = compiled_losses() if compiled else _losses
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
            sums += _gradient_step(policy, optimizer, batch, cfg, lr, beta, eps, losses)
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


Losses = Callable[
    [StackedPolicy, dict[str, torch.Tensor], PPOConfig, torch.Tensor, torch.Tensor],
    tuple[torch.Tensor, torch.Tensor],
]
"""`_losses`, or what torch.compile makes of it."""


@cache
def compiled_losses() -> Losses:
    """`_losses` compiled once per process (inductor), its backward too: the elementwise work
    of the SiLUs, the losses and their gradients fused into a few kernels around the matrix
    products. Shapes are symbolic (`dynamic=True`): one graph serves stack sizes, batches and
    widths (sizes that happen to be equal, a stack of 2 beside the 2-D action, recompile once),
    and a member's bits do not depend on the stack it is in or the threads."""
    return torch.compile(_losses, dynamic=True)


def _gradient_step(
    policy: StackedPolicy,
    optimizer: StackedOptimizer,
    batch: dict[str, torch.Tensor],
    cfg: PPOConfig,
    lr: torch.Tensor,
    beta: torch.Tensor,
    eps: torch.Tensor,
    losses: Losses,
) -> torch.Tensor:
    """One minibatch step of every member; (policy loss, value loss, entropy, KL, clip) x k.

    The forward and backward run by pieces of PIECE to 2·PIECE−1 members (one piece below
    that), then one clip and one optimizer step for all: a piece's activations stay in the
    cache, and a member's bits do not depend on the piece it is in.
    """
    parts = pieces(policy.k, PIECE)
    whole = len(parts) == 1
    optimizer.zero_grad(keep=not whole)
    stats = []
    for part in parts:
        members = policy if whole else policy.members(part, leaves=True)
        chunk = batch if whole else {name: x[part] for name, x in batch.items()}
        loss, stat = losses(members, chunk, cfg, beta[part], eps[part])
        loss.backward()
        stats.append(stat)
    clip_grad_norms(policy.parameters(), cfg.max_grad_norm)
    optimizer.step(lr)
    return torch.cat(stats, dim=1)


def _losses(
    policy: StackedPolicy,
    batch: dict[str, torch.Tensor],
    cfg: PPOConfig,
    beta: torch.Tensor,
    eps: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The members' summed loss and their (policy loss, value loss, entropy, KL, clip)."""
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
    loss = (policy_loss - beta * entropy + cfg.value_coef * value_loss).sum()
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean(1)
        clip_fraction = ((ratio - 1.0).abs() > eps[:, None]).float().mean(1)
        shown = policy_loss.abs() if cfg.policy_loss_stat == "absolute" else policy_loss
        return loss, torch.stack([shown, value_loss, entropy, approx_kl, clip_fraction]).detach()
