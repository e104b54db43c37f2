"""Each row of docs/mlagents-fidelity.md: where the inner PPO differs from ML-Agents 1.1.0."""

from __future__ import annotations

import math

import pytest
import torch

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import Policy, PolicyStack, gaussian_log_prob, policy_for
from meta.algorithm.ppo.optim import StackOptimizer
from meta.algorithm.ppo.rollout import Collector, NullTimers, Rollout
from meta.algorithm.ppo.update import (
    clipped_policy_loss,
    clipped_value_loss,
    flat_buffer,
    minibatches,
    take_in,
)
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.observe.tags import LEARNING_RATE
from tests.algorithm.stacking import (
    batch_of,
    observe,
    optimizer_for,
    stack_of,
    stacked_batches,
    step,
    train_one,
)

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


def _minibatch(policy: Policy, scale: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    n, obs, act = 64, policy.normalizer.mean.shape[0], policy.log_std.shape[0]
    x = stack_of(policy).features(torch.randn(1, n, obs, generator=g))[0]
    actions = torch.randn(n, act, generator=g)
    with torch.no_grad():
        old = gaussian_log_prob(actions, policy.actor(x), policy.log_std)
        values = policy.critic(x)[:, 0]
    adv = scale * torch.randn(n, generator=g)
    return batch_of(x, actions, old, values, adv, values + scale * torch.randn(n, generator=g))


def test_schedule_is_read_before_each_buffer_is_collected() -> None:
    seen: list[int] = []
    env = envs.make("FindTarget", num_areas=8, seed=0)
    policy = policy_for(env, NETWORK)

    def schedule(steps: int) -> Hyper:
        seen.append(steps)
        return Hyper(1e-3 * (1 + steps), 5e-3, 0.2)

    updates = train_one(env, policy, SMALL, 0, schedule=schedule).updates
    env.close()
    assert sorted(set(seen)) == [0, 256, 512]  # ML-Agents reads after the buffer: 256, 512, 768
    assert [u[LEARNING_RATE] for u in updates] == [1e-3 * (1 + s) for s in (0, 256, 512)]


def test_each_buffer_is_the_same_whole_number_of_steps_of_every_agent() -> None:
    rollout = _rollout(_policy(), steps=math.ceil(SMALL.buffer_size / 8))
    assert rollout.num_steps == 256 and rollout.rewards.shape == (32, 8)


def _sgd(policy: PolicyStack) -> StackOptimizer:
    """Plain steps at the learning rate: each step is minus the clipped gradient."""
    return optimizer_for(policy, PPOConfig(optimizer="sgd"))


def test_gradients_are_clipped_to_max_grad_norm_and_inf_is_mlagents_unclipped() -> None:
    hyper = Hyper(1.0, 5e-3, 0.2)
    for max_norm in (0.5, math.inf):
        policy = stack_of(_policy())
        batch = _minibatch(_policy(), scale=100.0)  # large losses: a gradient norm far above 0.5
        before = [p.detach().clone() for p in policy.parameters()]
        loss_grads = _plain_gradients(_policy(), batch)
        cfg = PPOConfig(max_grad_norm=max_norm)
        step(policy, _sgd(policy), batch, cfg, [hyper])
        steps = [b[0] - p.detach()[0] for b, p in zip(before, policy.parameters(), strict=True)]
        norm, raw = _norm(steps), _norm(loss_grads)
        assert raw > 10
        if max_norm == 0.5:
            assert norm == pytest.approx(0.5, rel=1e-4)
        else:
            pairs = zip(steps, loss_grads, strict=True)
            assert all(torch.allclose(s, g, rtol=1e-4, atol=1e-6) for s, g in pairs)
            assert norm == pytest.approx(raw.item(), rel=1e-4)


def test_each_member_of_a_stack_is_clipped_to_its_own_norm() -> None:
    # member 0's losses are large (clipped to 0.5), member 1's small (unclipped), member 2's
    # large again: one member's norm never scales another's
    policies = [_policy(), _policy(1), _policy(2)]
    batches = [_minibatch(policies[0], 100.0), _minibatch(policies[1], 1e-3)]
    batches.append(_minibatch(policies[2], 100.0))
    stack = stack_of(*policies)
    before = [p.detach().clone() for p in stack.parameters()]
    step(
        stack,
        _sgd(stack),
        stacked_batches(batches),
        PPOConfig(max_grad_norm=0.5),
        [Hyper(1.0, 5e-3, 0.2)] * 3,
    )
    for i, (policy, batch) in enumerate(zip(policies, batches, strict=True)):
        moved = [b[i] - p.detach()[i] for b, p in zip(before, stack.parameters(), strict=True)]
        raw = _norm(_plain_gradients(policy, batch))
        if i == 1:
            assert raw < 0.5
            assert _norm(moved) == pytest.approx(raw.item(), rel=1e-4)
        else:
            assert raw > 10
            assert _norm(moved) == pytest.approx(0.5, rel=1e-4)


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors]))


def _plain_gradients(policy: Policy, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of the whole loss with nothing clipped, as ML-Agents steps on them."""
    b = {key: x[0] for key, x in batch.items()}
    log_probs = gaussian_log_prob(b["actions"], policy.actor(b["features"]), policy.log_std)
    ratio = torch.exp(log_probs - b["old_log_probs"])
    low, high = torch.tensor([[0.8]]), torch.tensor([[1.2]])
    policy_loss = clipped_policy_loss(ratio[None], b["advantages"][None], low, high)[0]
    values = policy.critic(b["features"])[:, 0]
    value_loss = clipped_value_loss(
        values[None], b["old_values"][None], b["returns"][None], torch.tensor([[0.2]])
    )[0]
    entropy = (0.5 * (1.0 + math.log(2.0 * math.pi)) + policy.log_std).sum()
    loss = policy_loss - 5e-3 * entropy + 0.5 * value_loss
    return list(torch.autograd.grad(loss, list(policy.parameters())))


def test_advantages_are_normalised_per_minibatch() -> None:
    policy = _policy()
    rollout = _rollout(policy)
    cfg = PPOConfig(batch_size=64, buffer_size=256, num_epoch=1, max_steps=256)
    stack = stack_of(policy, _policy(1))
    rollouts = take_in(stack, [rollout, _rollout(_policy(1))], 0, False)
    buffer, _, lengths = flat_buffer(stack, rollouts, cfg)
    assert lengths == [256, 256]
    generators = [torch.Generator().manual_seed(i) for i in range(2)]
    batches = [batch for batch, _ in minibatches(buffer, cfg, generators, lengths)]
    assert len(batches) == 4
    for batch in batches:  # each member's its own mean 0 and (sample) std 1, not the buffer's
        assert batch["advantages"].shape == (2, 64)
        assert batch["advantages"].mean(1).abs().max().item() == pytest.approx(0.0, abs=1e-5)
        assert batch["advantages"].std(1).tolist() == pytest.approx([1.0, 1.0], abs=1e-4)


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
    entropy = stack_of(policy).entropy(False).item()  # a stack of one's
    assert entropy == pytest.approx(per_dimension.sum().item(), rel=1e-6)
    # by hand: each dimension's 0.5 * log(2 pi e) + log_std, summed (ML-Agents' mean is half)
    with torch.no_grad():
        policy.log_std.copy_(torch.tensor([0.1, -0.3]))
    by_hand = 2 * 0.5 * math.log(2 * math.pi * math.e) + (0.1 - 0.3)  # 2.6379
    assert stack_of(policy).entropy(False).item() == pytest.approx(by_hand, rel=1e-6)
    # a stack's entropy per member: this one's, and a member of log std 0 (2 log(2 pi e) / 2)
    other = _policy()
    with torch.no_grad():
        other.log_std.zero_()
    stack = stack_of(policy, other)
    assert stack.entropy(False).tolist() == pytest.approx(
        [by_hand, math.log(2 * math.pi * math.e)], rel=1e-6
    )
    assert stack_of(policy).entropy(False).tolist() == pytest.approx([by_hand], rel=1e-6)


@pytest.mark.parametrize("k", [1, 3])
def test_adam_epsilon_is_1e_7_where_mlagents_keeps_torchs_1e_8(k: int) -> None:
    # Adam's first step moves each parameter by lr * g / (|g| + eps): with g = 1e-7, by lr / 2
    policy = stack_of(*(_policy(i) for i in range(k)))
    start = [param.detach().clone() for param in policy.parameters()]
    optimizer = optimizer_for(policy, PPOConfig())
    for param in policy.parameters():
        param.grad = torch.full_like(param, 1e-7)
    optimizer.step([3e-4] * k)
    for before, param in zip(start, policy.parameters(), strict=True):
        assert torch.allclose(before - param.detach(), torch.full_like(before, 1.5e-4), rtol=1e-3)
    assert torch.optim.Adam([torch.zeros(1, requires_grad=True)]).defaults["eps"] == 1e-8


def test_normaliser_adds_1e_8_to_the_variance_and_clips_to_5() -> None:
    policy = _policy()
    normalizer = policy.normalizer
    observe(policy, torch.randn(100, normalizer.mean.shape[0]) * 3 + 1)
    obs = torch.randn(5, normalizer.mean.shape[0]) * 20
    expected = ((obs - normalizer.mean) / torch.sqrt(normalizer.var + 1e-8)).clamp(-5, 5)
    stack = PolicyStack([policy.state_dict()], True, 1e-8, "cpu")
    assert torch.allclose(stack.features(obs[None])[0], expected)


def test_the_policy_loss_is_reported_with_its_sign() -> None:
    ones = torch.ones(1, 4)  # the ratio of log-probabilities equal to the old: 1
    loss = clipped_policy_loss(ones, ones, torch.tensor([[0.8]]), torch.tensor([[1.2]]))
    assert loss.item() == -1.0  # ML-Agents logs |loss|: 1.0
