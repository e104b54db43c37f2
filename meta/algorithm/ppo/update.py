"""One PPO update: advantages of a buffer (GAE), then num_epoch passes of minibatch steps."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import torch

from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import Minibatch, gradient_step
from meta.algorithm.ppo.optim import Optimizer
from meta.algorithm.ppo.policy import Policy, gaussian_log_probs
from meta.algorithm.ppo.rollout import Rollout
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


def rollout_gae(rollout: Rollout, cfg: PPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """compute_gae over a rollout with the config's gamma and lambda; (T, n) each."""
    return compute_gae(
        rollout.rewards,
        rollout.values,
        rollout.next_values,
        rollout.boundaries,
        cfg.gamma,
        cfg.lambd,
    )


def flat_buffer(
    policy: Policy, rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor
) -> Minibatch:
    """The whole buffer as one batch of rows on the policy's device, advantages as computed.

    Features are the observations normalised once: the normaliser only moves between updates.
    """
    device = next(policy.parameters()).device
    with torch.no_grad():
        features = policy.features(rollout.buffer_rows(rollout.obs).to(device))
    columns = (rollout.actions, rollout.log_probs, rollout.values, advantages, returns)
    actions, log_probs, values, adv, ret = (rollout.buffer_rows(x).to(device) for x in columns)
    return Minibatch(features, actions, log_probs, values, adv, ret)


def normalised(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages at mean 0 and (sample) standard deviation 1, as ML-Agents scales a minibatch's."""
    std, mean = torch.std_mean(advantages)
    return (advantages - mean) / (std + 1e-8)


def buffer_normalised(advantages: torch.Tensor) -> torch.Tensor:
    """ML-Agents' scaling of a whole buffer: (A - mean) / (population std + 1e-10)."""
    std, mean = torch.std_mean(advantages, correction=0)
    return (advantages - mean) / (std + 1e-10)


def dimension_log_probs(policy: Policy, rollout: Rollout) -> Rollout:
    """The buffer with its actions' log-probabilities per dimension, (T, n, actions).

    Computed by `policy` as it acted (the same weights and normaliser statistics, so before the
    normaliser takes the buffer in): what `ratio=per_dimension` compares each dimension with.
    """
    steps, n = rollout.rewards.shape
    device = next(policy.parameters()).device
    with torch.no_grad():
        obs = rollout.obs.reshape(steps * n, -1).to(device)
        mean = policy.mean_from(policy.features(obs))
        actions = rollout.actions.reshape(steps * n, -1).to(device)
        per_dimension = gaussian_log_probs(actions, mean, policy.log_std)
    return replace(rollout, log_probs=per_dimension.cpu().reshape(steps, n, -1))


def ppo_update(
    policy: Policy,
    optimizer: Optimizer,
    rollout: Rollout,
    cfg: PPOConfig,
    hyper: Hyper,
    generator: torch.Generator,
    worker: ThreadPoolExecutor | None = None,
) -> dict[str, float]:
    """num_epoch passes of minibatch updates over one buffer; returns mean losses.

    With a `worker` thread the actor's and the critic's halves of each step run side by side.
    Besides ML-Agents' losses it reports, as cleanrl does, the mean approximate KL and clip
    fraction of the minibatch steps and the explained variance of the buffer's value
    estimates: whether an update (with an annealed learning rate) still moves the policy.
    """
    for group in optimizer.param_groups:
        group["lr"] = hyper.learning_rate
    advantages, returns = rollout_gae(rollout, cfg)
    buffer = flat_buffer(policy, rollout, advantages, returns)
    if cfg.advantage_normalization == "buffer":
        buffer = buffer._replace(advantages=buffer_normalised(buffer.advantages))
    sums = np.zeros(5)
    count = 0
    for batch in _minibatches(buffer, cfg, generator):
        sums += gradient_step(policy, optimizer, batch, cfg, hyper.epsilon, hyper.beta, worker)
        count += 1
    policy_loss, value_loss, entropy, approx_kl, clip_fraction = sums / count
    return {
        POLICY_LOSS: policy_loss,
        VALUE_LOSS: value_loss,
        ENTROPY: entropy,
        LEARNING_RATE: hyper.learning_rate,
        BETA: hyper.beta,
        EPSILON: hyper.epsilon,
        APPROX_KL: approx_kl,
        CLIP_FRACTION: clip_fraction,
        EXPLAINED_VARIANCE: explained_variance(
            rollout.buffer_rows(rollout.values), rollout.buffer_rows(returns)
        ),
    }


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): 1 is a perfect critic, <= 0 a useless one.

    NaN when the returns do not vary (nothing to explain).
    """
    v, r = values.double().ravel(), returns.double().ravel()
    spread = float(r.var(unbiased=False))
    if spread == 0.0:
        return float("nan")
    return 1.0 - float((r - v).var(unbiased=False)) / spread


def _minibatches(
    buffer: Minibatch, cfg: PPOConfig, generator: torch.Generator
) -> Iterator[Minibatch]:
    """num_epoch shuffled passes over the buffer in minibatches, advantages normalised in each
    (unless `advantage_normalization=buffer`: then they were, once, before the epochs)."""
    n = buffer.features.shape[0]
    device = buffer.features.device
    num_batches = max(n // cfg.batch_size, 1)
    for _ in range(cfg.num_epoch):
        order = torch.randperm(n, generator=generator).to(device)
        # Gather once per epoch; minibatches are then contiguous slices.
        shuffled = Minibatch(*(x.index_select(0, order) for x in buffer))
        for b in range(num_batches):
            rows = slice(b * cfg.batch_size, (b + 1) * cfg.batch_size)
            batch = Minibatch(*(column[rows] for column in shuffled))
            if cfg.advantage_normalization == "buffer":
                yield batch
            else:
                yield batch._replace(advantages=normalised(batch.advantages))
