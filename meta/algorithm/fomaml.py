"""First-order MAML (Nichol et al. 2018, section 5) on state_dicts (docs/algorithms.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import PolicyStack
from meta.algorithm.ppo.pieces import dimension_log_probs
from meta.algorithm.ppo.rollout import Collector
from meta.algorithm.ppo.update import buffer_gradient
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.reptile import NORMALIZER_PREFIX, Reptile, interpolate
from meta.algorithm.request import TrainRequest, TrainResult

_QUERY = 0x0F0A


class FOMAML(Reptile):
    """Each training also measures PPO's gradient at φ_i; θ <- θ − ε·mean_i g_i."""

    name = "fomaml"
    meta_gradient = True

    def update(self, theta: Weights, results: list[TrainResult], outer_lr: float) -> Weights:
        """Step θ along the mean meta-gradient (the normaliser moves as Reptile moves it)."""
        gradients = [r.meta_gradient for r in results if r.meta_gradient is not None]
        return fomaml_update(theta, [r.weights for r in results], gradients, outer_lr)


def meta_gradient(
    request: TrainRequest, env: AgentEnvironment, weights: Mapping[str, torch.Tensor]
) -> tuple[Weights, int]:
    """The gradient of PPO's loss at the request's trained `weights` on one fresh buffer; and
    its agent-steps.

    The buffer is collected by the trained policy from a reset of `env`; the loss is the inner
    training's (clipped surrogate at ratio 1, entropy, clipped value loss, advantages
    normalised over the buffer), its gradient clipped to ppo.max_grad_norm as every inner step.
    """
    cfg, network, hyper = request.ppo, request.network, request.hyper or Hyper.of(request.ppo)
    epsilon = network.normalizer_epsilon
    policy = PolicyStack([dict(weights)], network.normalize, epsilon, request.device)
    # a seed of its own for the fresh buffer, not the training's
    query_seed = int(np.random.SeedSequence([request.seed, _QUERY]).generate_state(1)[0])
    generator = torch.Generator().manual_seed(query_seed)
    collector = Collector(env, BEHAVIOR_NAME, policy, generator, cfg.time_horizon)
    rollout = collector.collect(max(math.ceil(cfg.buffer_size / collector.num_agents), 1))
    if cfg.ratio == "per_dimension":
        rollout = dimension_log_probs(policy, rollout)
    buffer_gradient(policy, [rollout], cfg, [hyper])
    gradient = {k: p.grad[0].detach().to("cpu", copy=True) for k, p in policy.params.items()}  # type: ignore[index]
    return gradient, rollout.num_steps


def fomaml_update(
    theta: Mapping[str, torch.Tensor],
    trained: Sequence[Mapping[str, torch.Tensor]],
    gradients: Sequence[Mapping[str, torch.Tensor]],
    step_size: float,
) -> Weights:
    """theta - epsilon * mean_i g_i; the normaliser's statistics towards the trained mean."""
    out: Weights = {}
    for key in gradients[0]:
        mean = torch.stack([g[key] for g in gradients]).mean(0)
        out[key] = theta[key] - step_size * mean
    statistics = [k for k in theta if k.startswith(NORMALIZER_PREFIX)]
    target = {k: torch.stack([w[k] for w in trained]).mean(0) for k in statistics}
    out.update(interpolate({k: theta[k] for k in statistics}, target, min(step_size, 1.0)))
    return {k: out[k] for k in theta}
