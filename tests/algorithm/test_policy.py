"""The acting path agrees with the update's: FrozenPolicy, a stack of one, the loss."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import Policy, gaussian_log_prob, make_policy
from meta.config.ppo import NetworkConfig, PPOConfig
from tests.algorithm.stacking import (
    batch_of,
    observe,
    optimizer_for,
    stack_of,
    stacked_batches,
    step,
)
from tests.algorithm.test_stacks import TOLERANCE


def _policy() -> Policy:
    policy = make_policy(10, 2, NetworkConfig(hidden_units=32), seed=3)
    observe(policy, torch.randn(500, 10, generator=torch.Generator().manual_seed(4)) * 3 + 1)
    with torch.no_grad():
        policy.log_std.fill_(-0.5)
    return policy


def test_frozen_policy_acts_as_the_stack_of_one() -> None:
    # the same features bit for bit; the actions' products pre-transposed, equal to rounding
    policy, obs = _policy(), torch.randn(64, 10) * 4
    frozen, stack = policy.frozen(), stack_of(policy)
    with torch.no_grad():
        x = stack.features(obs[None])
        assert torch.equal(frozen.features(obs), x[0])
        mean, value = stack.mean_from(x)[0], stack.value_from(x)[0]
    action, log_prob, got = frozen.act(obs, torch.Generator().manual_seed(5))
    noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(action, mean + policy.log_std.exp() * noise, rtol=1e-5, atol=1e-5)
    expected = gaussian_log_prob(action, mean, policy.log_std)
    torch.testing.assert_close(log_prob, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, value, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(frozen.value(obs), value, rtol=1e-6, atol=1e-6)


def test_the_update_scores_collected_actions_as_collection_did() -> None:
    # Before the first step PPO's ratio must be 1: the update's log-prob and value of a
    # collected action equal the ones collection recorded, and the entropy is the Gaussian's.
    policy, obs = _policy(), torch.randn(16, 10)
    action, log_prob, value = policy.frozen().act(obs, torch.Generator().manual_seed(0))
    stack = stack_of(policy)
    with torch.no_grad():
        x = stack.features(obs[None])
        update_log_prob = gaussian_log_prob(action, stack.mean_from(x)[0], policy.log_std)
        torch.testing.assert_close(update_log_prob, log_prob)
        torch.testing.assert_close(stack.value_from(x)[0], value)
        expected = torch.distributions.Normal(torch.zeros(2), policy.log_std.exp()).entropy()
        torch.testing.assert_close(stack.entropy(False), expected.sum()[None])


def _batch(generator: torch.Generator, n: int = 128) -> dict[str, torch.Tensor]:
    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(n, *shape, generator=generator)

    return batch_of(draw(10), draw(2), draw(), draw(), draw(), draw())


def _steps(
    worker: ThreadPoolExecutor | None, seeds: tuple[int, ...] = (1,)
) -> tuple[list[dict[str, torch.Tensor]], list[list[float]]]:
    """Four gradient steps of a stack of len(seeds) copies of _policy(), member i on batches
    drawn from seeds[i]; each member's weights and policy losses."""
    policy = stack_of(*[_policy()] * len(seeds))
    cfg = PPOConfig(learning_rate=1e-2)
    optimizer = optimizer_for(policy, cfg)
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    hypers = [Hyper(1e-2, 0.01, 0.2)] * len(seeds)
    losses: list[list[float]] = []
    for _ in range(4):
        batch = stacked_batches([_batch(g) for g in generators])
        losses.append(step(policy, optimizer, batch, cfg, hypers, worker)[0].tolist())
    return [policy.weights(i) for i in range(len(seeds))], losses


def test_halves_side_by_side_step_as_one_after_the_other_and_keep_the_state_dict() -> None:
    ([serial], serial_losses), start = _steps(None), _policy().state_dict()
    with ThreadPoolExecutor(1) as worker:
        [side_by_side], losses = _steps(worker)
    assert list(side_by_side) == list(start)
    assert losses == serial_losses
    assert all(torch.equal(side_by_side[k], serial[k]) for k in serial)
    assert not torch.equal(serial["actor.0.weight"], start["actor.0.weight"])
    # a stack of three: side by side as one after the other, bit for bit; each member as its
    # stack of one to the tolerance
    seeds = (1, 2, 3)
    three, three_losses = _steps(None, seeds)
    with ThreadPoolExecutor(1) as worker:
        threaded, threaded_losses = _steps(worker, seeds)
    assert threaded_losses == three_losses
    assert all(torch.equal(a[k], b[k]) for a, b in zip(threaded, three, strict=True) for k in a)
    for i, seed in enumerate(seeds):
        ([alone], alone_losses) = _steps(None, (seed,))
        for key, value in alone.items():
            torch.testing.assert_close(three[i][key], value, rtol=0, atol=TOLERANCE)
        assert [row[i] for row in three_losses] == pytest.approx(
            [row[0] for row in alone_losses], abs=TOLERANCE
        )


def test_a_stack_acts_as_its_members_frozen_policies() -> None:
    # a stack of one acts through the member's FrozenPolicy, bit for bit; a stack of several
    # acts for all at once (batched products), each member as its own to rounding
    policies = [_policy(), make_policy(10, 2, NetworkConfig(hidden_units=32), seed=8)]
    obs = torch.randn(2, 16, 10) * 4
    one = stack_of(policies[0])
    got = one.act(obs[:1], [torch.Generator().manual_seed(5)])
    want = policies[0].frozen().act(obs[0], torch.Generator().manual_seed(5))
    assert all(torch.equal(g[0], w) for g, w in zip(got, want, strict=True))
    assert torch.equal(one.member_value(0, obs[0]), want[2])
    stack = stack_of(*policies)
    got = stack.act(obs, [torch.Generator().manual_seed(5 + i) for i in range(2)])
    for i, policy in enumerate(policies):
        want = policy.frozen().act(obs[i], torch.Generator().manual_seed(5 + i))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g[i], w, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(stack.values(obs)[i], want[2], rtol=1e-5, atol=1e-5)
        # a member's own value (bootstraps) takes the single kernel: the same to rounding
        torch.testing.assert_close(stack.member_value(i, obs[i]), want[2], rtol=1e-5, atol=1e-5)
        assert all(torch.equal(stack.weights(i)[k], v) for k, v in policy.state_dict().items())
