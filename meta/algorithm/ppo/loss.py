"""PPO's clipped losses and one gradient step on a minibatch, actor and critic side by side.

The loss is policy_loss - beta * entropy + value_coef * value_loss. Its first two terms depend
only on the actor (and log std), the last only on the critic, so their gradients are disjoint:
each half runs forward and backward on its own, one after the other or, given a worker thread,
at the same time on two cores (torch releases the GIL inside its kernels). Both orders compute
the same numbers, so a seed gives the same weights whichever way a machine runs it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import torch

from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.optim import SGD, Adam, Optimizer
from meta.algorithm.ppo.policy import Policy, gaussian_log_prob, gaussian_log_probs

ADAM_EPS = 1e-7
"""Adam's epsilon unless ppo.adam_epsilon says otherwise; ML-Agents 1.1.0 keeps torch's 1e-8."""


class Minibatch(NamedTuple):
    """Rows of one minibatch; advantages already normalised."""

    features: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


def make_optimizer(
    policy: Policy,
    learning_rate: float,
    kind: str = "adam",
    eps: float = ADAM_EPS,
    action_scale: float = 1.0,
) -> Optimizer:
    """A fresh optimizer over the policy's parameters, in module order (its state follows them).

    `adam` is ML-Agents' (fused: one kernel steps every parameter, in about a third of the
    time the for-each implementation takes at this network's size); `sgd` takes plain steps.
    Both are torch.optim's, stepped through its functions (meta.algorithm.ppo.optim). With an
    `action_scale` s the actor's mean layer steps as it would stored times s: ML-Agents' mean
    layer, whose actions `clip(a, -s, s) / s` are ours.
    """
    *_, mean_layer = (m for m in policy.actor if isinstance(m, torch.nn.Linear))
    scaled = list(mean_layer.parameters()) if action_scale != 1.0 else []
    if kind == "sgd":
        return SGD(policy.parameters(), lr=learning_rate, scaled=scaled, scale=action_scale)
    return Adam(
        policy.parameters(),
        lr=learning_rate,
        eps=eps,
        fused=True,
        scaled=scaled,
        scale=action_scale,
    )


def clipped_policy_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, epsilon: float
) -> torch.Tensor:
    """PPO's surrogate: -mean(min(r*A, clip(r, 1-eps, 1+eps)*A)), r the probability ratio.

    Log-probabilities of shape (batch, actions) give ML-Agents' surrogate: one ratio per action
    dimension, each clipped, the mean taken over every sample and dimension.
    """
    if log_probs.ndim == 2:
        advantages = advantages.unsqueeze(-1)
    ratio = torch.exp(log_probs - old_log_probs)
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return -torch.min(ratio * advantages, clipped * advantages).mean()


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, epsilon: float
) -> torch.Tensor:
    """ML-Agents' value loss: mean(max((R-V)^2, (R-V_clipped)^2)), V moved at most eps."""
    clipped = old_values + torch.clamp(values - old_values, -epsilon, epsilon)
    return torch.max((returns - values).square(), (returns - clipped).square()).mean()


def ratio_diagnostics(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate KL(old || new) and the fraction of clipped ratios, as cleanrl logs them.

    KL is estimated as mean((r - 1) - log r) (Schulman's k3: unbiased and never negative).
    """
    with torch.no_grad():
        log_ratio = log_probs - old_log_probs
        ratio = torch.exp(log_ratio)
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > epsilon).float().mean()
    return approx_kl, clip_fraction


def _actor_half(
    policy: Policy, batch: Minibatch, cfg: PPOConfig, epsilon: float, beta: float
) -> tuple[torch.Tensor, ...]:
    """Backward of policy_loss - beta * entropy; returns both, KL and clip fraction, detached.

    With `ratio=per_dimension` the batch's old log-probabilities are per dimension, and so are
    the KL estimate and clip fraction (averaged over samples and dimensions).
    """
    mean = policy.mean_from(batch.features)
    log_density = gaussian_log_probs if cfg.ratio == "per_dimension" else gaussian_log_prob
    log_probs = log_density(batch.actions, mean, policy.log_std)
    if log_probs.shape != batch.old_log_probs.shape:
        raise ValueError(
            f"old log-probabilities of shape {tuple(batch.old_log_probs.shape)} for "
            f"ppo.ratio={cfg.ratio} (expected {tuple(log_probs.shape)})"
        )
    policy_loss = clipped_policy_loss(log_probs, batch.old_log_probs, batch.advantages, epsilon)
    entropy = policy.mean_entropy() if cfg.entropy == "mean" else policy.entropy()
    (policy_loss - beta * entropy).backward()
    approx_kl, clip_fraction = ratio_diagnostics(log_probs, batch.old_log_probs, epsilon)
    return policy_loss.detach(), entropy.detach(), approx_kl, clip_fraction


def _critic_half(
    policy: Policy, batch: Minibatch, epsilon: float, value_coef: float
) -> torch.Tensor:
    """Backward of value_coef * value_loss; returns the value loss, detached."""
    values = policy.value_from(batch.features)
    value_loss = clipped_value_loss(values, batch.old_values, batch.returns, epsilon)
    (value_coef * value_loss).backward()
    return value_loss.detach()


def gradient_step(
    policy: Policy,
    optimizer: Optimizer,
    batch: Minibatch,
    cfg: PPOConfig,
    epsilon: float,
    beta: float,
    worker: ThreadPoolExecutor | None = None,
) -> tuple[float, ...]:
    """Zero, backward both halves, clip the global gradient norm, step.

    Returns (policy loss, value loss, entropy, approximate KL, clip fraction); the last two
    are measured before the step.
    """
    optimizer.zero_grad()
    if worker is None:
        actor = _actor_half(policy, batch, cfg, epsilon, beta)
        value_loss = _critic_half(policy, batch, epsilon, cfg.value_coef)
    else:
        future = worker.submit(_actor_half, policy, batch, cfg, epsilon, beta)
        value_loss = _critic_half(policy, batch, epsilon, cfg.value_coef)
        actor = future.result()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
    optimizer.step()
    policy_loss, entropy, approx_kl, clip_fraction = actor
    if cfg.policy_loss_stat == "absolute":
        policy_loss = policy_loss.abs()
    return tuple(torch.stack([policy_loss, value_loss, entropy, approx_kl, clip_fraction]).tolist())


def loss_gradient(
    policy: Policy, batch: Minibatch, cfg: PPOConfig, epsilon: float, beta: float
) -> None:
    """Leave the clipped gradient of PPO's loss on `batch` in the parameters' .grad (no step)."""
    policy.zero_grad()
    _actor_half(policy, batch, cfg, epsilon, beta)
    _critic_half(policy, batch, epsilon, cfg.value_coef)
    torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
