"""Each row of docs/mlagents-fidelity.md: where the inner PPO differs from ML-Agents 1.1.0."""

from __future__ import annotations

import math

import pytest
import torch

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import (
    Minibatch,
    clipped_policy_loss,
    clipped_value_loss,
    gradient_step,
    make_optimizer,
)
from meta.algorithm.ppo.policy import Policy, gaussian_log_prob
from meta.algorithm.ppo.rollout import Collector, NullTimers, Rollout
from meta.algorithm.ppo.train import PPORun, policy_for, train
from meta.algorithm.ppo.update import _minibatches, compute_gae, flat_buffer
from meta.observe.tags import LEARNING_RATE

NETWORK = NetworkConfig(hidden_units=16, num_layers=1)
SMALL = PPOConfig(batch_size=128, buffer_size=256, max_steps=768, num_epoch=2, time_horizon=16)


def _policy(seed: int = 0) -> Policy:
    env = envs.make("FindTarget", num_areas=8, seed=seed)
    policy = policy_for(env, NETWORK, seed)
    env.close()
    return policy


def _rollout(policy: Policy, steps: int = 32) -> Rollout:
    env = envs.make("FindTarget", num_areas=8, seed=1)
    generator = torch.Generator().manual_seed(0)
    collector = Collector(env, BEHAVIOR_NAME, policy, generator, 16, NullTimers())
    rollout = collector.collect(steps)
    env.close()
    return rollout


def _minibatch(policy: Policy, scale: float = 1.0) -> Minibatch:
    g = torch.Generator().manual_seed(3)
    n, obs, act = 64, policy.normalizer.mean.shape[0], policy.log_std.shape[0]
    x = policy.features(torch.randn(n, obs, generator=g))
    actions = torch.randn(n, act, generator=g)
    with torch.no_grad():
        old = gaussian_log_prob(actions, policy.mean_from(x), policy.log_std)
        values = policy.value_from(x)
    adv = scale * torch.randn(n, generator=g)
    return Minibatch(x, actions, old, values, adv, values + scale * torch.randn(n, generator=g))


def test_schedule_is_read_before_each_buffer_is_collected() -> None:
    seen: list[int] = []
    env = envs.make("FindTarget", num_areas=8, seed=0)
    policy = policy_for(env, NETWORK)
    updates: list[dict[str, float]] = []

    def schedule(steps: int) -> Hyper:
        seen.append(steps)
        return Hyper(1e-3 * (1 + steps), 5e-3, 0.2)

    train(
        PPORun(env, policy, SMALL, 0, schedule=schedule, on_update=lambda _, u: updates.append(u))
    )
    env.close()
    assert seen == [0, 256, 512]  # ML-Agents reads after the buffer: 256, 512, 768
    assert [u[LEARNING_RATE] for u in updates] == [1e-3 * (1 + s) for s in seen]


def test_each_buffer_is_the_same_whole_number_of_steps_of_every_agent() -> None:
    rollout = _rollout(_policy(), steps=math.ceil(SMALL.buffer_size / 8))
    assert rollout.num_steps == 256 and rollout.rewards.shape == (32, 8)


def test_gradients_are_clipped_to_max_grad_norm_and_inf_is_mlagents_unclipped() -> None:
    for max_norm in (0.5, math.inf):
        policy = _policy()
        batch = _minibatch(policy, scale=100.0)  # large losses: a gradient norm far above 0.5
        before = [p.detach().clone() for p in policy.parameters()]
        reference = _policy()
        loss_grads = _plain_gradients(reference, batch)
        optimizer = torch.optim.SGD(policy.parameters(), lr=1.0)
        cfg = PPOConfig(max_grad_norm=max_norm)
        gradient_step(policy, optimizer, batch, cfg, epsilon=0.2, beta=5e-3)
        steps = [b - p.detach() for b, p in zip(before, policy.parameters(), strict=True)]
        norm, raw = _norm(steps), _norm(loss_grads)
        assert raw > 10
        if max_norm == 0.5:
            assert norm == pytest.approx(0.5, rel=1e-4)
        else:
            pairs = zip(steps, loss_grads, strict=True)
            assert all(torch.allclose(s, g, rtol=1e-4, atol=1e-6) for s, g in pairs)
            assert norm == pytest.approx(raw.item(), rel=1e-4)


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors]))


def _plain_gradients(policy: Policy, batch: Minibatch) -> list[torch.Tensor]:
    """Gradients of the whole loss with nothing clipped, as ML-Agents steps on them."""
    log_probs = gaussian_log_prob(batch.actions, policy.mean_from(batch.features), policy.log_std)
    policy_loss = clipped_policy_loss(log_probs, batch.old_log_probs, batch.advantages, 0.2)
    value_loss = clipped_value_loss(
        policy.value_from(batch.features), batch.old_values, batch.returns, 0.2
    )
    loss = policy_loss - 5e-3 * policy.entropy() + 0.5 * value_loss
    return list(torch.autograd.grad(loss, list(policy.parameters())))


def test_advantages_are_normalised_per_minibatch() -> None:
    policy = _policy()
    rollout = _rollout(policy)
    adv, ret = compute_gae(
        rollout.rewards, rollout.values, rollout.next_values, rollout.boundaries, 0.99, 0.95
    )
    cfg = PPOConfig(batch_size=64, buffer_size=256, num_epoch=1, max_steps=256)
    buffer = flat_buffer(policy, rollout, adv, ret)
    batches = list(_minibatches(buffer, cfg, torch.Generator().manual_seed(0)))
    assert len(batches) == 4
    for batch in batches:  # each its own mean 0 and (sample) std 1, not the buffer's
        assert batch.advantages.mean().item() == pytest.approx(0.0, abs=1e-5)
        assert batch.advantages.std().item() == pytest.approx(1.0, abs=1e-4)


def test_the_ratio_is_the_joint_probabilitys_over_action_dimensions() -> None:
    mean, log_std = torch.tensor([[0.1, -0.3]]), torch.tensor([-0.5, 0.2])
    action = torch.tensor([[0.4, 0.4]])
    joint = torch.distributions.Normal(mean, log_std.exp()).log_prob(action).sum(-1)
    assert gaussian_log_prob(action, mean, log_std).shape == (1,)
    assert torch.allclose(gaussian_log_prob(action, mean, log_std), joint)


def test_entropy_is_summed_over_action_dimensions() -> None:
    policy = _policy()
    per_dimension = torch.distributions.Normal(0.0, policy.log_std.exp()).entropy()
    assert policy.log_std.shape == (2,)
    assert policy.entropy().item() == pytest.approx(per_dimension.sum().item(), rel=1e-6)
    # by hand: each dimension's 0.5 * log(2 pi e) + log_std, summed (ML-Agents' mean is half)
    with torch.no_grad():
        policy.log_std.copy_(torch.tensor([0.1, -0.3]))
    by_hand = 2 * 0.5 * math.log(2 * math.pi * math.e) + (0.1 - 0.3)  # 2.6379
    assert policy.entropy().item() == pytest.approx(by_hand, rel=1e-6)


def test_adam_epsilon_is_1e_7_where_mlagents_keeps_torchs_1e_8() -> None:
    # Adam's first step moves each parameter by lr * g / (|g| + eps): with g = 1e-7, by lr / 2
    policy = _policy()
    start = [param.detach().clone() for param in policy.parameters()]
    optimizer = make_optimizer(policy, 3e-4)
    for param in policy.parameters():
        param.grad = torch.full_like(param, 1e-7)
    optimizer.step()
    for before, param in zip(start, policy.parameters(), strict=True):
        assert torch.allclose(before - param.detach(), torch.full_like(before, 1.5e-4), rtol=1e-3)
    assert torch.optim.Adam([torch.zeros(1, requires_grad=True)]).defaults["eps"] == 1e-8


def test_normaliser_adds_1e_8_to_the_variance_and_clips_to_5() -> None:
    policy = _policy()
    normalizer = policy.normalizer
    normalizer.update(torch.randn(100, normalizer.mean.shape[0]) * 3 + 1)
    obs = torch.randn(5, normalizer.mean.shape[0]) * 20
    expected = ((obs - normalizer.mean) / torch.sqrt(normalizer.var + 1e-8)).clamp(-5, 5)
    assert torch.allclose(normalizer(obs), expected)


def test_the_policy_loss_is_reported_with_its_sign() -> None:
    zeros = torch.zeros(4)
    loss = clipped_policy_loss(zeros, zeros, torch.ones(4), 0.2)
    assert loss.item() == -1.0  # ML-Agents logs |loss|: 1.0
