"""Helpers for tests of the one inner PPO: a policy as a stack of one, a minibatch with a stack
axis, and a training of one environment (what PPORun and train were before every training
became a stack of k members)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import Policy, PolicyStack
from meta.algorithm.ppo.optim import StackOptimizer
from meta.algorithm.ppo.train import Stack, Trained, make_optimizer, train_stack
from meta.algorithm.ppo.update import actor_loss, critic_loss, gradient_step, hyper_tensors
from meta.algorithm.ppo.weights import OptimizerState, cpu_weights
from meta.config.ppo import PPOConfig

LOSSES = (actor_loss, critic_loss)
BATCH_KEYS = ("features", "actions", "old_log_probs", "old_values", "advantages", "returns")


def stack_of(*policies: Policy) -> PolicyStack:
    """The policies as one stack on the CPU (their normaliser settings the first's)."""
    first = policies[0]
    return PolicyStack([cpu_weights(p) for p in policies], first.normalize, first.epsilon, "cpu")


def observe(policy: Policy, obs: torch.Tensor) -> None:
    """Move the policy's normaliser by a batch of observations (N, obs), as training does."""
    stack = stack_of(policy)
    stack.update_normalizer(obs[None], 0)
    policy.load_state_dict(stack.weights(0))


def mean_action(policy: Policy | PolicyStack, obs: torch.Tensor) -> torch.Tensor:
    """The policy's (or a stack of one's) mean action for (batch, obs)."""
    stack = stack_of(policy) if isinstance(policy, Policy) else policy
    with torch.no_grad():
        return stack.mean_from(stack.features(obs[None]))[0]


def batch_of(*rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """A minibatch of one member from its (B, ...) columns in Minibatch's old order."""
    return {key: x[None] for key, x in zip(BATCH_KEYS, rows, strict=True)}


def stacked_batches(batches: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Members' minibatches (each (1, B, ...)) as one (k, B, ...)."""
    return {key: torch.cat([b[key] for b in batches]) for key in BATCH_KEYS}


def step(
    policy: PolicyStack,
    optimizer: StackOptimizer,
    batch: dict[str, torch.Tensor],
    cfg: PPOConfig,
    hypers: Sequence[Hyper],
    worker: object = None,
) -> torch.Tensor:
    """One gradient step of every member; (policy loss, value loss, entropy, KL, clip) x k."""
    hyper = hyper_tensors(list(hypers), policy.device)
    return gradient_step(policy, optimizer, batch, cfg, hyper, LOSSES, worker)  # type: ignore[arg-type]


def optimizer_for(policy: PolicyStack, cfg: PPOConfig) -> StackOptimizer:
    """The training's optimizer of a stack (train.make_optimizer)."""
    return make_optimizer(policy, cfg)


def train_one(
    env: AgentEnvironment,
    policy: Policy,
    cfg: PPOConfig,
    seed: int,
    schedule: Callable[[int], Hyper] | None = None,
    updates: int | None = None,
    optimizer_state: OptimizerState | None = None,
) -> Trained:
    """Train `policy` on `env` as a stack of one; the trained weights are loaded into it."""
    start = Hyper.of(cfg)
    stack = Stack(
        starts=[cpu_weights(policy)],
        cfg=cfg,
        normalize=policy.normalize,
        normalizer_epsilon=policy.epsilon,
        device="cpu",
        seeds=[seed],
        schedules=[schedule or (lambda steps: start.after(cfg, steps, cfg.max_steps))],
        optimizer_states=[optimizer_state],
        updates=updates,
    )
    (trained,) = train_stack(stack, [env])
    policy.load_state_dict(trained.weights)
    return trained
