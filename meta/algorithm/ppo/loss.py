"""PPO's clipped losses over a stack: the actor's half and the critic's half of every member.

The loss is policy_loss - beta * entropy + value_coef * value_loss; the first two terms depend
only on the actor (and log std), the last only on the critic (update.backward_halves).

A batch is a dict of (k, B, ...) tensors: `features` (observations as the networks see them),
`actions`, `old_log_probs` ((k, B), or (k, B, actions) with `ratio=per_dimension`),
`old_values`, `advantages` (already normalised) and `returns`.
"""

from __future__ import annotations

import torch

from meta.algorithm.ppo.kernels import times
from meta.algorithm.ppo.network import PolicyStack
from meta.algorithm.ppo.policy import gaussian_log_prob
from meta.config.ppo import PPOConfig

Batch = dict[str, torch.Tensor]


def clipped_policy_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """PPO's surrogate per member: -mean(min(r*A, clip(r, 1-eps, 1+eps)*A)), r the ratio (k, B).

    A ratio per action dimension (k, B, actions) gives ML-Agents' surrogate: each dimension
    clipped, the mean taken over every sample and dimension.
    """
    if ratio.ndim == 3:
        advantages, low, high = advantages[..., None], low[..., None], high[..., None]
    clipped = torch.clamp(ratio, low, high)
    return -torch.min(ratio * advantages, clipped * advantages).flatten(1).mean(1)


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, epsilon: torch.Tensor
) -> torch.Tensor:
    """ML-Agents' value loss per member: mean(max((R-V)^2, (R-V_clipped)^2)), V moved at most
    eps; `epsilon` (k, 1)."""
    clipped = old_values + torch.clamp(values - old_values, -epsilon, epsilon)
    return torch.max((returns - values).square(), (returns - clipped).square()).mean(1)


def actor_loss(
    policy: PolicyStack, batch: Batch, cfg: PPOConfig, hyper: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The members' summed policy_loss - beta * entropy; and (policy loss, entropy,
    approximate KL, clip fraction) x k, detached. `hyper` holds each member's (k,) `beta`,
    `epsilon` and the clip's bounds `low` and `high` (1 ∓ epsilon, rounded once).

    KL is estimated as mean((r - 1) - log r) (Schulman's k3), as cleanrl logs it; with
    `ratio=per_dimension` both diagnostics are over samples and dimensions.
    """
    mean = policy.mean_from(batch["features"])
    log_std = policy.log_std[:, None]
    per_dimension = cfg.ratio == "per_dimension"
    log_probs = gaussian_log_prob(batch["actions"], mean, log_std, per_dimension)
    old = batch["old_log_probs"]
    if log_probs.shape != old.shape:
        raise ValueError(
            f"old log-probabilities of shape {tuple(old.shape)} for "
            f"ppo.ratio={cfg.ratio} (expected {tuple(log_probs.shape)})"
        )
    log_ratio = log_probs - old
    ratio = torch.exp(log_ratio)
    low, high, epsilon = hyper["low"][:, None], hyper["high"][:, None], hyper["epsilon"]
    policy_loss = clipped_policy_loss(ratio, batch["advantages"], low, high)
    # the same view as the log-densities': its gradients add up in the order a single
    # network's do, before they reach the stack's log std
    entropy = policy.entropy(cfg.entropy == "mean", log_std)
    loss = (policy_loss - times(hyper["beta"], entropy)).sum()
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).flatten(1).mean(1)
        bound = epsilon.view(-1, *([1] * (ratio.ndim - 1)))
        clip_fraction = ((ratio - 1.0).abs() > bound).float().flatten(1).mean(1)
        shown = policy_loss.abs() if cfg.policy_loss_stat == "absolute" else policy_loss
        return loss, torch.stack([shown, entropy, approx_kl, clip_fraction]).detach()


def critic_loss(
    policy: PolicyStack, batch: Batch, cfg: PPOConfig, hyper: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The members' summed value_coef * value_loss; and the value losses (k,), detached."""
    values = policy.value_from(batch["features"])
    epsilon = hyper["epsilon"][:, None]
    value_loss = clipped_value_loss(values, batch["old_values"], batch["returns"], epsilon)
    coef = torch.full_like(value_loss, cfg.value_coef, dtype=torch.float64)
    return times(coef, value_loss).sum(), value_loss.detach()
