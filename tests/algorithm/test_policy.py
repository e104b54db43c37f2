"""The fast paths agree with the plain ones: FrozenPolicy with Policy, FlatAdam with Adam."""

from __future__ import annotations

import torch

from meta.algorithm.ppo.flat_adam import FlatAdam
from meta.algorithm.ppo.policy import Policy, make_policy
from meta.config import NetworkConfig


def _policy() -> Policy:
    policy = make_policy(10, 2, NetworkConfig(hidden_units=32), seed=3)
    policy.normalizer.update(torch.randn(500, 10) * 3 + 1)
    with torch.no_grad():
        policy.log_std.fill_(-0.5)
    return policy


def test_frozen_policy_acts_as_the_policy() -> None:
    policy, obs = _policy(), torch.randn(64, 10) * 4
    frozen = policy.frozen()
    with torch.inference_mode():
        expected = policy.act(obs, torch.Generator().manual_seed(5))
        assert torch.equal(frozen.features(obs), policy.features(obs))
        value = frozen.value(obs)
    got = frozen.act(obs, torch.Generator().manual_seed(5))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(value, expected[2], rtol=1e-6, atol=1e-6)


def test_evaluate_matches_act_log_prob_and_entropy_formula() -> None:
    policy, obs = _policy(), torch.randn(16, 10)
    with torch.no_grad():
        action, log_prob, value = policy.act(obs, torch.Generator().manual_seed(0))
        lp, entropy, v = policy.evaluate(obs, action)
    torch.testing.assert_close(lp, log_prob)
    torch.testing.assert_close(v, value)
    expected = torch.distributions.Normal(torch.zeros(2), policy.log_std.exp()).entropy().sum()
    torch.testing.assert_close(entropy, expected.expand(16))


def _train_steps(policy: Policy, flat: bool) -> list[torch.Tensor]:
    params = list(policy.parameters())
    optimizer: torch.optim.Optimizer | FlatAdam
    if flat:
        optimizer = FlatAdam(params, lr=1e-2, eps=1e-7)
    else:
        optimizer = torch.optim.Adam(params, lr=1e-2, eps=1e-7)
    x = torch.randn(128, 10)
    for _ in range(5):
        loss = policy.evaluate(x, torch.randn(128, 2))[0].square().mean() + policy.value(x).sum()
        if isinstance(optimizer, FlatAdam):
            optimizer.zero_grad()
            loss.backward()
            optimizer.clip_grad_norm(0.5)
        else:
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
        optimizer.step()
    if isinstance(optimizer, FlatAdam):
        optimizer.release()
    return [p.detach().clone() for p in params]


def test_flat_adam_steps_as_adam_with_clipping_and_keeps_the_state_dict() -> None:
    torch.manual_seed(0)
    plain = _train_steps(_policy(), flat=False)
    torch.manual_seed(0)
    policy = _policy()
    keys = list(policy.state_dict())
    flat = _train_steps(policy, flat=True)
    for a, b in zip(flat, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert list(policy.state_dict()) == keys
    assert all(p.grad is None for p in policy.parameters())
