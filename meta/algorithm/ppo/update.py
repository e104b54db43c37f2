"""One PPO update of a stack: each member's buffer valued, GAE, then minibatch epochs of the
clipped losses.

The loss is policy_loss - beta * entropy + value_coef * value_loss; the first two terms depend
only on the actor (and log std), the last only on the critic (`backward_halves`). A batch is a
dict of (k, B, ...) tensors: `features` (observations as the networks see them), `actions`,
`old_log_probs` ((k, B), or (k, B, actions) with `ratio=per_dimension`), `old_values`,
`advantages` (already normalised) and `returns`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache, partial

import torch

from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.kernels import clip_grad_norms, gathered, times
from meta.algorithm.ppo.network import PolicyStack, gaussian_log_prob, pieces
from meta.algorithm.ppo.optim import StackOptimizer
from meta.algorithm.ppo.rollout import Rollout, next_state_values
from meta.config.ppo import PPOConfig
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


PIECE = 8
"""Members per forward and backward of a gradient step: more spill the cache (at 64 units and
batches of 1,024 a step of 32 members took 59 ms in one piece, 48 ms in four)."""

Buffers = list[Rollout | None]
"""Each member's buffer (None: the member's training is over)."""
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


def take_in(policy: PolicyStack, rollouts: Buffers, prior: int, apart: bool) -> Buffers:
    """Each member's normaliser moved by its buffer, and its buffer valued again with it.

    ML-Agents updates the normaliser with a trajectory and then estimates its values with the
    updated statistics (`get_trajectory_value_estimates`); the values from acting are stale by
    one update of the normaliser, most of all for a fresh start's first buffer. The actions'
    log-probabilities stay those of the acting policy, as in ML-Agents. `apart`: buffers of
    their own lengths (assembled from pieces), each valued by its member alone.
    """
    if policy.normalize:  # not `apart`: buffers of pieces take it in piece by piece
        obs = torch.stack([r.buffer_rows(r.obs) for r in rollouts]).to(policy.device)  # type: ignore[union-attr]
        policy.update_normalizer(obs, prior)
    if not apart:
        return list(revalued(policy, rollouts))  # type: ignore[arg-type]
    return [
        None if r is None else revalued(policy.member(i), [r])[0] for i, r in enumerate(rollouts)
    ]


def revalued(policy: PolicyStack, rollouts: list[Rollout]) -> list[Rollout]:
    """Every buffer's values and next-state values estimated again by its member."""
    steps, n = rollouts[0].rewards.shape
    every = torch.stack(
        [torch.cat([r.obs.reshape(steps * n, -1), r.bootstrap.last_obs]) for r in rollouts]
    ).to(policy.device)
    with torch.no_grad():
        values = policy.values(every).cpu()
    out = []
    for i, r in enumerate(rollouts):
        b = r.bootstrap
        member = values[i].reshape(steps + 1, n)
        value_of = partial(policy.member_value, i)
        next_values = next_state_values(value_of, member, b.ended, b.pieces, policy.device)
        out.append(replace(r, values=member[:-1], next_values=next_values))
    return out


def ppo_update(
    policy: PolicyStack,
    optimizer: StackOptimizer,
    rollouts: Buffers,
    cfg: PPOConfig,
    hypers: list[Hyper],
    generators: list[torch.Generator],
    worker: ThreadPoolExecutor | None = None,
    compiled: bool = False,
) -> list[dict[str, float] | None]:
    """num_epoch passes of minibatch steps of every member over its buffer; its statistics.

    A member without a buffer (None: its training is over) does not step. With a `worker`
    thread the actor's and the critic's halves of each step run side by side (`compiled`:
    both as torch.compile's kernels). Besides ML-Agents' losses it reports, as cleanrl does,
    the mean approximate KL and clip fraction of the minibatch steps and the explained variance
    of the buffer's value estimates.
    """
    buffer, returns, lengths = flat_buffer(policy, rollouts, cfg)
    hyper = hyper_tensors(hypers, policy.device)
    losses = compiled_losses() if compiled else (actor_loss, critic_loss)
    sums = torch.zeros(5, policy.k, dtype=torch.float64)
    counts = torch.zeros(policy.k, dtype=torch.float64)
    for batch, active in minibatches(buffer, cfg, generators, lengths):
        stats = gradient_step(policy, optimizer, batch, cfg, hyper, losses, worker, active)
        mask = torch.tensor([True] * policy.k if active is None else active)
        sums += stats.double().where(mask, 0.0)
        counts += mask
    means = (sums / counts.clamp_min(1.0)).tolist()
    out: list[dict[str, float] | None] = []
    for i, (r, hyper_i, returns_i) in enumerate(zip(rollouts, hypers, returns, strict=True)):
        if r is None or returns_i is None:
            out.append(None)
            continue
        policy_loss, value_loss, entropy, approx_kl, clip_fraction = (row[i] for row in means)
        fit = explained_variance(r.buffer_rows(r.values), r.buffer_rows(returns_i))
        out.append(
            {
                POLICY_LOSS: policy_loss,
                VALUE_LOSS: value_loss,
                ENTROPY: entropy,
                LEARNING_RATE: hyper_i.learning_rate,
                BETA: hyper_i.beta,
                EPSILON: hyper_i.epsilon,
                APPROX_KL: approx_kl,
                CLIP_FRACTION: clip_fraction,
                EXPLAINED_VARIANCE: fit,
            }
        )
    return out


def buffer_gradient(
    policy: PolicyStack, rollouts: list[Rollout], cfg: PPOConfig, hypers: list[Hyper]
) -> None:
    """Leave each member's clipped gradient of PPO's loss on its whole buffer in the
    parameters' .grad (no step): advantages normalised over the buffer, as one minibatch."""
    buffer, _, _ = flat_buffer(policy, list(rollouts), cfg)
    if cfg.advantage_normalization != "buffer":
        buffer["advantages"] = _normalised(buffer["advantages"])
    policy.zero_grad()
    backward_halves(
        policy, buffer, cfg, hyper_tensors(hypers, policy.device), (actor_loss, critic_loss)
    )
    clip_grad_norms(policy.parameters(), cfg.max_grad_norm)


def hyper_tensors(hypers: list[Hyper], device: torch.device) -> dict[str, torch.Tensor]:
    """Each member's learning rate, beta, epsilon and clip bounds as (k,) tensors; the bounds
    rounded once from 1 ∓ epsilon, as a clip at Python numbers rounds them; the learning
    rate and beta in float64 on the CPU, as a single network's optimizer and loss take them."""
    epsilons = [h.epsilon for h in hypers]
    return {
        "learning_rate": torch.tensor([h.learning_rate for h in hypers], dtype=torch.float64),
        "beta": torch.tensor([h.beta for h in hypers], dtype=torch.float64),
        "epsilon": torch.tensor(epsilons, device=device),
        "low": torch.tensor([1.0 - e for e in epsilons], device=device),
        "high": torch.tensor([1.0 + e for e in epsilons], device=device),
    }


def flat_buffer(
    policy: PolicyStack, rollouts: Buffers, cfg: PPOConfig
) -> tuple[Batch, list[torch.Tensor | None], list[int]]:
    """Every member's buffer as rows (k, N, ...) on the device, advantages by GAE (normalised
    over the buffer with `advantage_normalization=buffer`); each member's (T, n) returns; and
    its rows. Buffers of their own lengths (pieces, or none for a member whose training is over)
    fill the first rows of N, the longest's; the rest are zeros that no minibatch takes.

    Features are the observations normalised once: the normaliser only moves between updates.
    """
    whole = cfg.buffer_assembly != "pieces" and all(r is not None for r in rollouts)
    gae: list[tuple[torch.Tensor, torch.Tensor] | None]
    if whole:  # GAE runs over time for all members at once: (T, k, n)
        columns = ("rewards", "values", "next_values", "boundaries")
        rewards, values, after, cut = (
            torch.stack([getattr(x, c) for x in rollouts], 1) for c in columns
        )
        advantages, every_return = compute_gae(rewards, values, after, cut, cfg.gamma, cfg.lambd)
        gae = [(advantages[:, i], every_return[:, i]) for i in range(len(rollouts))]
    else:
        gae = [
            None
            if r is None
            else compute_gae(r.rewards, r.values, r.next_values, r.boundaries, cfg.gamma, cfg.lambd)
            for r in rollouts
        ]
    lengths = [0 if r is None else r.num_steps for r in rollouts]

    def rows(column: Callable[[int, Rollout], torch.Tensor]) -> torch.Tensor:
        parts = [None if r is None else r.buffer_rows(column(i, r)) for i, r in enumerate(rollouts)]
        shape = next(p for p in parts if p is not None).shape[1:]
        out = torch.zeros(len(parts), max(lengths), *shape)
        for i, part in enumerate(parts):
            if part is not None:
                out[i, : len(part)] = part
        return out.to(policy.device)

    obs = rows(lambda _, r: r.obs)
    with torch.no_grad():
        features = policy.features(obs)
    buffer = {
        "features": features,
        "actions": rows(lambda _, r: r.actions),
        "old_log_probs": rows(lambda _, r: r.log_probs),
        "old_values": rows(lambda _, r: r.values),
        "advantages": rows(lambda i, _: gae[i][0]),  # type: ignore[index]
        "returns": rows(lambda i, _: gae[i][1]),  # type: ignore[index]
    }
    if cfg.advantage_normalization == "buffer":
        buffer["advantages"] = _buffer_normalised(buffer["advantages"], None if whole else lengths)
    return buffer, [None if g is None else g[1] for g in gae], lengths


def _normalised(advantages: torch.Tensor) -> torch.Tensor:
    """Each member's (k, B) advantages at mean 0 and sample standard deviation 1, as ML-Agents
    scales a minibatch's."""
    std, mean = torch.std_mean(advantages, dim=1, keepdim=True)
    return (advantages - mean) / (std + 1e-8)


def _buffer_normalised(advantages: torch.Tensor, lengths: list[int] | None) -> torch.Tensor:
    """ML-Agents' scaling of a whole buffer: (A - mean) / (population std + 1e-10), each
    member's over its own rows (`lengths`; None: all)."""
    if lengths is None:
        std, mean = torch.std_mean(advantages, dim=1, correction=0, keepdim=True)
        return (advantages - mean) / (std + 1e-10)
    out = advantages.clone()
    for i, length in enumerate(lengths):
        if length:
            std, mean = torch.std_mean(advantages[i, :length], correction=0)
            out[i, :length] = (advantages[i, :length] - mean) / (std + 1e-10)
    return out


def minibatches(
    buffer: Batch, cfg: PPOConfig, generators: list[torch.Generator], lengths: list[int]
) -> Iterator[tuple[Batch, list[bool] | None]]:
    """num_epoch shuffled passes over every member's buffer in minibatches, each member in its
    own order, advantages normalised in each (unless `advantage_normalization=buffer`); and
    which members step (None: all). A member of fewer minibatches, or none, sits out the rest."""
    device = buffer["features"].device
    batch_size, width = cfg.batch_size, buffer["features"].shape[1]
    alike = len(set(lengths)) == 1
    batches = [max(length // batch_size, 1) if length else 0 for length in lengths]
    for _ in range(cfg.num_epoch):
        orders = [torch.randperm(n, generator=g) for g, n in zip(generators, lengths, strict=True)]
        if not alike:
            orders = [torch.cat([o, o.new_zeros(width - len(o))]) for o in orders]
        # gathered once per epoch; minibatches are then contiguous slices
        order = torch.stack(orders).to(device)
        shuffled = {name: gathered(x, order) for name, x in buffer.items()}
        for b in range(max(batches)):
            rows = slice(b * batch_size, (b + 1) * batch_size)
            batch = {name: x[:, rows] for name, x in shuffled.items()}
            if cfg.advantage_normalization != "buffer":
                batch["advantages"] = _normalised(batch["advantages"])
            active = None if alike else [b < n for n in batches]
            yield batch, active


def gradient_step(
    policy: PolicyStack,
    optimizer: StackOptimizer,
    batch: Batch,
    cfg: PPOConfig,
    hyper: dict[str, torch.Tensor],
    losses: tuple[Loss, Loss],
    worker: ThreadPoolExecutor | None = None,
    active: list[bool] | None = None,
) -> torch.Tensor:
    """One minibatch step of every member (of those `active`, None: all); (policy loss, value
    loss, entropy, KL, clip) x k, the last two measured before the step.

    The forward and backward run by pieces of PIECE to 2·PIECE−1 members (one piece below
    that), then one clip and one optimizer step for all: a piece's activations stay in the
    cache, and a member's bits do not depend on the piece it is in. A member that sits out
    does not step (its weights and moments stay as they are).
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
    optimizer.step(hyper["learning_rate"].tolist(), active)
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
    """The gradients of both halves of the loss left in the parameters; their statistics.

    The halves' graphs share no parameter, so one backward pass over both (one thread) leaves
    the bits that a pass each (two threads, side by side) does."""
    actor, critic = losses

    def half(loss: Loss) -> torch.Tensor:
        value, stats = loss(policy, batch, cfg, hyper)
        value.backward()
        return stats

    if worker is None:
        (actor_value, actor_stats), (critic_value, value_losses) = (
            loss(policy, batch, cfg, hyper) for loss in losses
        )
        torch.autograd.backward([actor_value, critic_value])
        return actor_stats, value_losses
    future = worker.submit(half, actor)
    value_losses = half(critic)
    return future.result(), value_losses


@cache
def compiled_losses() -> tuple[Loss, Loss]:
    """Both halves' losses and their backward compiled once per process (inductor, symbolic
    shapes: docs/performance.md, "Compiled stacks"); a member's bits do not depend on its
    stack or the threads."""
    return torch.compile(actor_loss, dynamic=True), torch.compile(critic_loss, dynamic=True)
