"""The acting path agrees with the plain one and with the update's: FrozenPolicy, Policy, loss."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.loss import Minibatch, gradient_step, make_optimizer
from meta.algorithm.ppo.policy import Policy, gaussian_log_prob, make_policy


def _policy() -> Policy:
    policy = make_policy(10, 2, NetworkConfig(hidden_units=32), seed=3)
    policy.normalizer.update(
        torch.randn(500, 10, generator=torch.Generator().manual_seed(4)) * 3 + 1
    )
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


def test_the_update_scores_collected_actions_as_collection_did() -> None:
    # Before the first step PPO's ratio must be 1: the update's log-prob and value of a
    # collected action equal the ones collection recorded, and the entropy is the Gaussian's.
    policy, obs = _policy(), torch.randn(16, 10)
    action, log_prob, value = policy.frozen().act(obs, torch.Generator().manual_seed(0))
    with torch.no_grad():
        x = policy.features(obs)
        update_log_prob = gaussian_log_prob(action, policy.mean_from(x), policy.log_std)
        torch.testing.assert_close(update_log_prob, log_prob)
        torch.testing.assert_close(policy.value_from(x), value)
        expected = torch.distributions.Normal(torch.zeros(2), policy.log_std.exp()).entropy()
        torch.testing.assert_close(policy.entropy(), expected.sum())


def _batch(generator: torch.Generator, n: int = 128) -> Minibatch:
    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(n, *shape, generator=generator)

    return Minibatch(draw(10), draw(2), draw(), draw(), draw(), draw())


def _steps(worker: ThreadPoolExecutor | None) -> tuple[dict[str, torch.Tensor], list[float]]:
    policy = _policy()
    optimizer = make_optimizer(policy, 1e-2)
    generator = torch.Generator().manual_seed(1)
    losses: list[float] = []
    for _ in range(4):
        batch = _batch(generator)
        losses += gradient_step(policy, optimizer, batch, PPOConfig(), 0.2, 0.01, worker)
    return policy.state_dict(), losses


def test_halves_side_by_side_step_as_one_after_the_other_and_keep_the_state_dict() -> None:
    serial, serial_losses = _steps(None)
    with ThreadPoolExecutor(1) as worker:
        side_by_side, losses = _steps(worker)
    assert list(side_by_side) == list(_policy().state_dict())
    assert losses == serial_losses
    assert all(torch.equal(side_by_side[k], serial[k]) for k in serial)
    assert not torch.equal(serial["actor.0.weight"], _policy().state_dict()["actor.0.weight"])
