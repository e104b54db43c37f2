"""One PPO update of a stack: each member's buffer valued, GAE, then minibatch epochs.

Every member updates on its own buffer with its own random stream, learning rate, beta and
epsilon; every forward, backward and optimizer step is one for all k members.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache, partial

import torch

from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.kernels import clip_grad_norms
from meta.algorithm.ppo.loss import Batch, actor_loss, critic_loss
from meta.algorithm.ppo.network import PolicyStack, pieces
from meta.algorithm.ppo.optim import StackOptimizer
from meta.algorithm.ppo.rollout import Rollout, next_state_values
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

Loss = Callable[
    [PolicyStack, Batch, PPOConfig, dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]
]
"""`actor_loss` or `critic_loss`, or what torch.compile makes of it."""


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    boundaries: torch.Tensor,
    gamma: float,
    lambd: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over time-major (T, ...) tensors; (adv, returns).

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


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): 1 is a perfect critic, <= 0 a useless one.

    NaN when the returns do not vary (nothing to explain).
    """
    v, r = values.double().ravel(), returns.double().ravel()
    spread = float(r.var(unbiased=False))
    if spread == 0.0:
        return float("nan")
    return 1.0 - float((r - v).var(unbiased=False)) / spread


def take_in(policy: PolicyStack, rollouts: list[Rollout], prior: int) -> list[Rollout]:
    """Each member's normaliser moved by its buffer, and its buffer valued again with it.

    ML-Agents updates the normaliser with a trajectory and then estimates its values with the
    updated statistics (`get_trajectory_value_estimates`); the values from acting are stale by
    one update of the normaliser, most of all for a fresh start's first buffer. The actions'
    log-probabilities stay those of the acting policy, as in ML-Agents.
    """
    if policy.normalize:
        obs = torch.stack([r.buffer_rows(r.obs) for r in rollouts]).to(policy.device)
        policy.update_normalizer(obs, prior)
    return revalued(policy, rollouts)


def revalued(policy: PolicyStack, rollouts: list[Rollout]) -> list[Rollout]:
    """Every buffer's values and next-state values estimated again by its member."""
    steps, n = rollouts[0].rewards.shape
    every = torch.stack(
        [torch.cat([r.obs.reshape(steps * n, -1), r.bootstrap.last_obs]) for r in rollouts]  # type: ignore[union-attr]
    ).to(policy.device)
    with torch.no_grad():
        values = policy.values(every).cpu()
    out = []
    for i, r in enumerate(rollouts):
        b = r.bootstrap
        assert b is not None
        member = values[i].reshape(steps + 1, n)
        value_of = partial(policy.member_value, i)
        next_values = next_state_values(value_of, member, b.ended, b.pieces, policy.device)
        out.append(replace(r, values=member[:-1], next_values=next_values))
    return out


def ppo_update(
    policy: PolicyStack,
    optimizer: StackOptimizer,
    rollouts: list[Rollout],
    cfg: PPOConfig,
    hypers: list[Hyper],
    generators: list[torch.Generator],
    worker: ThreadPoolExecutor | None = None,
    compiled: bool = False,
) -> list[dict[str, float]]:
    """num_epoch passes of minibatch steps of every member over its buffer; its statistics.

    With a `worker` thread the actor's and the critic's halves of each step run side by side
    (`compiled`: both as torch.compile's kernels). Besides ML-Agents' losses it reports, as
    cleanrl does, the mean approximate KL and clip fraction of the minibatch steps and the
    explained variance of the buffer's value estimates.
    """
    buffer, returns = flat_buffer(policy, rollouts, cfg)
    hyper = hyper_tensors(hypers, policy.device)
    losses = compiled_losses() if compiled else (actor_loss, critic_loss)
    total = buffer["features"].shape[1]
    sums = torch.zeros(5, policy.k, dtype=torch.float64)
    count = 0
    for batch in minibatches(buffer, cfg, generators, total):
        sums += gradient_step(policy, optimizer, batch, cfg, hyper, losses, worker).double()
        count += 1
    means = (sums / count).tolist()
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
                EXPLAINED_VARIANCE: explained_variance(
                    r.buffer_rows(r.values), r.buffer_rows(returns[i])
                ),
            }
        )
    return out


def buffer_gradient(
    policy: PolicyStack, rollouts: list[Rollout], cfg: PPOConfig, hypers: list[Hyper]
) -> None:
    """Leave each member's clipped gradient of PPO's loss on its whole buffer in the
    parameters' .grad (no step): advantages normalised over the buffer, as one minibatch."""
    buffer, _ = flat_buffer(policy, rollouts, cfg)
    if cfg.advantage_normalization != "buffer":
        std, mean = torch.std_mean(buffer["advantages"], dim=1, keepdim=True)
        buffer["advantages"] = (buffer["advantages"] - mean) / (std + 1e-8)
    policy.zero_grad()
    backward_halves(
        policy, buffer, cfg, hyper_tensors(hypers, policy.device), (actor_loss, critic_loss)
    )
    clip_grad_norms(policy.parameters(), cfg.max_grad_norm)


def hyper_tensors(hypers: list[Hyper], device: torch.device) -> dict[str, torch.Tensor]:
    """Each member's learning rate, beta, epsilon and clip bounds as (k,) tensors; the bounds
    rounded once from 1 ∓ epsilon, as a clip at Python numbers rounds them; the learning
    rate and a copy of beta in float64, as a single network's optimizer and loss take them."""

    def column(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, device=device)

    return {
        "learning_rate": torch.tensor([h.learning_rate for h in hypers], dtype=torch.float64),
        "beta": column([h.beta for h in hypers]),
        "beta64": torch.tensor([h.beta for h in hypers], dtype=torch.float64),
        "epsilon": column([h.epsilon for h in hypers]),
        "low": column([1.0 - h.epsilon for h in hypers]),
        "high": column([1.0 + h.epsilon for h in hypers]),
    }


def flat_buffer(
    policy: PolicyStack, rollouts: list[Rollout], cfg: PPOConfig
) -> tuple[Batch, list[torch.Tensor]]:
    """Every member's buffer as rows (k, N, ...) on the device, advantages by GAE (normalised
    over the buffer with `advantage_normalization=buffer`); and each member's (T, n) returns.

    Features are the observations normalised once: the normaliser only moves between updates.
    """
    columns = {
        name: torch.stack([getattr(r, name) for r in rollouts], 1)
        for name in ("rewards", "values", "next_values", "boundaries")
    }
    # GAE runs over time for all members at once: (T, k, n)
    advantages, returns = compute_gae(
        columns["rewards"],
        columns["values"],
        columns["next_values"],
        columns["boundaries"],
        cfg.gamma,
        cfg.lambd,
    )

    def rows(column: Callable[[int, Rollout], torch.Tensor]) -> torch.Tensor:
        return torch.stack([r.buffer_rows(column(i, r)) for i, r in enumerate(rollouts)]).to(
            policy.device
        )

    obs = rows(lambda _, r: r.obs)
    with torch.no_grad():
        features = policy.features(obs)
    buffer = {
        "features": features,
        "actions": rows(lambda _, r: r.actions),
        "old_log_probs": rows(lambda _, r: r.log_probs),
        "old_values": rows(lambda _, r: r.values),
        "advantages": rows(lambda i, _: advantages[:, i]),
        "returns": rows(lambda i, _: returns[:, i]),
    }
    if cfg.advantage_normalization == "buffer":
        std, mean = torch.std_mean(buffer["advantages"], dim=1, correction=0, keepdim=True)
        buffer["advantages"] = (buffer["advantages"] - mean) / (std + 1e-10)
    return buffer, [returns[:, i] for i in range(len(rollouts))]


def minibatches(buffer: Batch, cfg: PPOConfig, generators: list[torch.Generator], total: int):  # type: ignore[no-untyped-def]
    """num_epoch shuffled passes over every member's buffer in minibatches, each member in its
    own order, advantages normalised in each (unless `advantage_normalization=buffer`)."""
    device = buffer["features"].device
    batch_size = cfg.batch_size
    for _ in range(cfg.num_epoch):
        order = torch.stack([torch.randperm(total, generator=g) for g in generators]).to(device)
        # gathered once per epoch; minibatches are then contiguous slices
        shuffled = {name: _gathered(x, order) for name, x in buffer.items()}
        for b in range(max(total // batch_size, 1)):
            rows = slice(b * batch_size, (b + 1) * batch_size)
            batch = {name: x[:, rows] for name, x in shuffled.items()}
            if cfg.advantage_normalization != "buffer":
                std, mean = torch.std_mean(batch["advantages"], dim=1, keepdim=True)
                batch["advantages"] = (batch["advantages"] - mean) / (std + 1e-8)
            yield batch


def _gathered(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Rows of each member's (k, N, ...) in its own order (k, N)."""
    index = order.view(*order.shape, *([1] * (x.ndim - 2))).expand(*order.shape, *x.shape[2:])
    return torch.gather(x, 1, index)


def gradient_step(
    policy: PolicyStack,
    optimizer: StackOptimizer,
    batch: Batch,
    cfg: PPOConfig,
    hyper: dict[str, torch.Tensor],
    losses: tuple[Loss, Loss],
    worker: ThreadPoolExecutor | None = None,
) -> torch.Tensor:
    """One minibatch step of every member; (policy loss, value loss, entropy, KL, clip) x k,
    the last two measured before the step.

    The forward and backward run by pieces of PIECE to 2·PIECE−1 members (one piece below
    that), then one clip and one optimizer step for all: a piece's activations stay in the
    cache, and a member's bits do not depend on the piece it is in.
    """
    parts = pieces(policy.k, PIECE)
    whole = len(parts) == 1
    optimizer.zero_grad(keep=not whole)
    actor_stats, value_losses = [], []
    for part in parts:
        members = policy if whole else policy.members(part, leaves=True)
        chunk = batch if whole else {name: x[part] for name, x in batch.items()}
        mine = hyper if whole else {name: x[part] for name, x in hyper.items()}
        actor, value = backward_halves(members, chunk, cfg, mine, losses, worker)
        actor_stats.append(actor)
        value_losses.append(value)
    clip_grad_norms(policy.parameters(), cfg.max_grad_norm)
    optimizer.step(hyper["learning_rate"].tolist())
    policy_loss, entropy, approx_kl, clip_fraction = torch.cat(actor_stats, 1)
    return torch.stack([policy_loss, torch.cat(value_losses), entropy, approx_kl, clip_fraction])


def backward_halves(
    policy: PolicyStack,
    batch: Batch,
    cfg: PPOConfig,
    hyper: dict[str, torch.Tensor],
    losses: tuple[Loss, Loss],
    worker: ThreadPoolExecutor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of both halves of the loss left in the parameters; their statistics."""
    actor, critic = losses

    def half(loss: Loss) -> torch.Tensor:
        value, stats = loss(policy, batch, cfg, hyper)
        value.backward()
        return stats

    if worker is None:
        return half(actor), half(critic)
    future = worker.submit(half, actor)
    value_losses = half(critic)
    return future.result(), value_losses


@cache
def compiled_losses() -> tuple[Loss, Loss]:
    """Both halves' losses compiled once per process (inductor), their backward too: the
    elementwise work of the SiLUs, the losses and their gradients fused into a few kernels
    around the matrix products. Shapes are symbolic (`dynamic=True`): one graph serves stack
    sizes, batches and widths, and a member's bits do not depend on its stack or the threads."""
    return torch.compile(actor_loss, dynamic=True), torch.compile(critic_loss, dynamic=True)
