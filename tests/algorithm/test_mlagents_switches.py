"""The switches to ML-Agents 1.1.0's PPO (`ppo=mlagents`), each checked by hand-computed values."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import (
    Policy,
    PolicyStack,
    gaussian_log_prob,
    make_policy,
    policy_for,
)
from meta.algorithm.ppo.optim import StackOptimizer
from meta.algorithm.ppo.pieces import dimension_log_probs
from meta.algorithm.ppo.rollout import Bootstrap, Collector, Rollout
from meta.algorithm.ppo.update import clipped_policy_loss, flat_buffer, minibatches
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.observe.tags import LEARNING_RATE, POLICY_LOSS
from tests.algorithm.stacking import BATCH_KEYS, batch_of, optimizer_for, stack_of, step, train_one

NETWORK = NetworkConfig(hidden_units=16, num_layers=1)
SMALL = PPOConfig(batch_size=128, buffer_size=256, max_steps=768, num_epoch=2, time_horizon=16)


def _policy() -> Policy:
    env = envs.make("FindTarget", num_areas=8, seed=0)
    policy = policy_for(env, NETWORK, 0)
    env.close()
    return policy


def test_per_dimension_ratio_clips_each_dimension_and_averages() -> None:
    ratio = torch.tensor([[[1.5, 0.9], [1.5, 0.5]]])  # (k=1, B=2, actions=2)
    adv = torch.tensor([[1.0, -2.0]])
    low, high = torch.tensor([[0.8]]), torch.tensor([[1.2]])
    # sample 1: min(1.5, 1.2) = 1.2 and min(0.9, 0.9) = 0.9; sample 2 (A = -2):
    # min(-3, -2.4) = -3 and min(-1, -1.6) = -1.6; the mean of the four, negated
    expected = -(1.2 + 0.9 - 3.0 - 1.6) / 4
    assert clipped_policy_loss(ratio, adv, low, high).item() == pytest.approx(expected)
    # the joint ratios, 1.35 and 0.75: min(1.35, 1.2) = 1.2 and min(-1.5, -1.6) = -1.6
    joint = clipped_policy_loss(ratio.prod(-1), adv, low, high).item()
    assert joint == pytest.approx(-(1.2 - 1.6) / 2)
    # in a stack of three, each member's own: the second's advantages negated (A = -1, 2):
    # min(-1.5, -1.2) = -1.5, min(-0.9, -0.9) = -0.9, min(3, 2.4) = 2.4, min(1, 1.6) = 1
    three = clipped_policy_loss(
        ratio.repeat(3, 1, 1), torch.cat([adv, -adv, adv]), low.repeat(3, 1), high.repeat(3, 1)
    )
    assert three.tolist() == pytest.approx([expected, -(-1.5 - 0.9 + 2.4 + 1.0) / 4, expected])


def test_mean_entropy_is_mlagents_over_dimensions() -> None:
    policy = _policy()
    with torch.no_grad():
        policy.log_std.copy_(torch.tensor([0.0, math.log(2.0)]))
    two_pi_e = 2.0 * math.pi * math.e
    by_hand = (0.5 * math.log(two_pi_e + 1e-7) + 0.5 * math.log(4.0 * two_pi_e + 1e-7)) / 2
    summed = math.log(two_pi_e) + math.log(2.0)
    assert stack_of(policy).entropy(True).item() == pytest.approx(by_hand, rel=1e-6)
    assert stack_of(policy).entropy(False).item() == pytest.approx(summed, rel=1e-6)
    # a stack's members, this policy and one of log std 0 (each dimension 0.5 log(2 pi e))
    other = _policy()
    with torch.no_grad():
        other.log_std.zero_()
    zero = 0.5 * math.log(two_pi_e + 1e-7)
    assert stack_of(policy, other).entropy(True).tolist() == pytest.approx([by_hand, zero])
    assert stack_of(policy).entropy(True).tolist() == pytest.approx([by_hand], rel=1e-6)


def _rollout_of(advantages: list[float]) -> Rollout:
    """A buffer of one agent whose GAE advantages are `advantages` at gamma 0 (rewards, values
    0): rows that say their index in every other column."""
    n = len(advantages)
    index = torch.arange(float(n))[:, None]
    return Rollout(
        obs=index[..., None].repeat(1, 1, 3),
        actions=index[..., None].repeat(1, 1, 2),
        log_probs=index,
        values=torch.zeros(n, 1),
        rewards=torch.tensor(advantages)[:, None],
        next_values=torch.zeros(n, 1),
        boundaries=torch.ones(n, 1),
        bootstrap=Bootstrap(torch.zeros(1, 3), np.zeros((n, 1), bool), []),
    )


def test_buffer_normalisation_is_population_std_once_before_the_epochs() -> None:
    cfg = dataclasses.replace(SMALL, advantage_normalization="buffer", gamma=0.0)
    policy = PolicyStack([make_policy(3, 2, NETWORK, 0).state_dict()] * 2, False, 1e-8, "cpu")
    buffer, _, _ = flat_buffer(
        policy, [_rollout_of([1.0, 2.0, 3.0, 4.0]), _rollout_of([2, 4, 6, 8])], cfg
    )
    # mean 2.5, population variance 1.25; each member its own: the second's mean 5, variance 5
    expected = (torch.tensor([1.0, 2.0, 3.0, 4.0]) - 2.5) / (math.sqrt(1.25) + 1e-10)
    torch.testing.assert_close(buffer["advantages"][0], expected)
    torch.testing.assert_close(buffer["advantages"][1], expected)
    n = 256
    rows = {
        key: torch.arange(float(n)).reshape(1, n, *([1] * (key in ("features", "actions"))))
        for key in BATCH_KEYS
    }
    rows["features"], rows["actions"] = (
        rows["features"].repeat(1, 1, 3),
        rows["actions"].repeat(1, 1, 2),
    )
    generators = [torch.Generator().manual_seed(0)]
    for batch, _ in minibatches(rows, cfg, generators, [n]):
        # rows are left as given: each row's advantage is still its index
        torch.testing.assert_close(batch["advantages"], batch["returns"])
    per_minibatch, _ = next(minibatches(rows, SMALL, [torch.Generator().manual_seed(0)], [n]))
    assert per_minibatch["advantages"].mean().abs().item() < 1e-5


def test_adam_epsilon_is_the_configured_one() -> None:
    cfg = dataclasses.replace(SMALL, adam_epsilon=1e-8)
    one = optimizer_for(stack_of(_policy()), cfg)  # a training's own (train.make_optimizer)
    assert one.eps == 1e-8 and one.member_state(0, 1.0)["param_groups"][0]["eps"] == 1e-8
    three = optimizer_for(stack_of(_policy(), _policy(), _policy()), cfg)
    assert three.eps == 1e-8
    assert optimizer_for(stack_of(_policy()), SMALL).eps == 1e-7


def test_after_buffer_timing_reads_the_schedule_after_the_buffers_steps() -> None:
    seen: list[int] = []
    env = envs.make("FindTarget", num_areas=8, seed=0)

    def schedule(steps: int) -> Hyper:
        seen.append(steps)
        return Hyper(1e-3 * (1 + steps), 5e-3, 0.2)

    cfg = dataclasses.replace(SMALL, schedule_timing="after_buffer")
    policy = policy_for(env, NETWORK)
    updates = train_one(env, policy, cfg, 0, schedule=schedule).updates
    env.close()
    assert {256, 512, 768} <= set(seen)
    assert [u[LEARNING_RATE] for u in updates] == [1e-3 * (1 + s) for s in (256, 512, 768)]


@pytest.mark.parametrize("k", [1, 3])
def test_a_stacks_normalisers_take_the_prior_and_their_own_observations(k: int) -> None:
    # member i sees (2, 4) times s = 1 + i after the prior (1 observation, mean 0, variance 1):
    # count 3, mean 6 s / 3 = 2 s, variance (1 + 2 s^2 + (3 s)^2 * 2 / 3) / 3 = (1 + 8 s^2) / 3
    # (ML-Agents' 1 + 8 s^2 running variance over its 3 steps); a member that has statistics
    # already keeps its count
    policy = make_policy(1, 2, dataclasses.replace(NETWORK, normalize=True), 0)
    stack = PolicyStack([policy.state_dict()] * k, True, 1e-8, "cpu")
    scale = torch.arange(1.0, k + 1.0)[:, None, None]
    stack.update_normalizer(torch.tensor([[[2.0], [4.0]]]) * scale, prior=1)
    count, mean, var = (stack.buffers[f"normalizer.{n}"] for n in ("count", "mean", "var"))
    assert count.tolist() == [3.0] * k
    assert mean[:, 0].tolist() == pytest.approx([2.0 * (1 + i) for i in range(k)])
    assert var[:, 0].tolist() == pytest.approx([(1 + 8 * (1 + i) ** 2) / 3 for i in range(k)])
    stack.update_normalizer(torch.zeros(k, 1, 1), prior=1)  # no prior again
    assert stack.buffers["normalizer.count"].tolist() == [4.0] * k
    member = stack.member(k - 1)
    member.prime(5)
    assert float(member.buffers["normalizer.count"][0]) == 4.0
    fresh = PolicyStack([policy.state_dict()] * k, True, 1e-8, "cpu")
    fresh.update_normalizer(torch.tensor([[[2.0], [4.0]]]).expand(k, 2, 1), prior=0)
    assert fresh.buffers["normalizer.count"].tolist() == [2.0] * k  # no prior: (2, 4) alone
    assert fresh.buffers["normalizer.mean"][:, 0].tolist() == [3.0] * k
    assert fresh.buffers["normalizer.var"][:, 0].tolist() == [1.0] * k


def test_per_dimension_log_probs_are_the_acting_policys_and_sum_to_its_joint() -> None:
    env = envs.make("FindTarget", num_areas=8, seed=1)
    policy = policy_for(env, NETWORK, 0)
    collector = Collector(env, BEHAVIOR_NAME, policy, torch.Generator().manual_seed(0), 16)
    rollout = collector.collect(32)
    env.close()
    per_dimension = dimension_log_probs(stack_of(policy).member(0), rollout).log_probs
    assert per_dimension.shape == (32, 8, 2)
    torch.testing.assert_close(per_dimension.sum(-1), rollout.log_probs, rtol=1e-5, atol=1e-5)


def test_absolute_policy_loss_stat_reports_its_size() -> None:
    policy = _policy()
    n, obs = 8, policy.normalizer.mean.shape[0]
    x = torch.zeros(n, obs)
    actions = torch.zeros(n, 2)
    with torch.no_grad():
        old = gaussian_log_prob(actions, policy.actor(x), policy.log_std)
    values = torch.zeros(n)
    adv = torch.ones(n)
    batch = batch_of(x, actions, old, values, adv, values)
    hyper = [Hyper(1e-9, 0.0, 0.2)]
    stack = stack_of(policy)
    signed = step(stack, optimizer_for(stack, SMALL), batch, SMALL, hyper)
    absolute_cfg = dataclasses.replace(SMALL, policy_loss_stat="absolute")
    stack = stack_of(policy)
    absolute = step(stack, optimizer_for(stack, SMALL), batch, absolute_cfg, hyper)
    # old log-probabilities are the policy's own: ratio 1, loss -mean(A) = -1
    assert signed[0, 0].item() == pytest.approx(-1.0)
    assert absolute[0, 0].item() == pytest.approx(1.0)


def test_joint_old_log_probs_for_a_per_dimension_ratio_are_refused() -> None:
    policy = _policy()
    x, actions = torch.zeros(8, policy.normalizer.mean.shape[0]), torch.zeros(8, 2)
    joint = torch.zeros(8)
    batch = batch_of(x, actions, joint, joint, joint, joint)
    cfg = dataclasses.replace(SMALL, ratio="per_dimension")
    stack = stack_of(policy)
    with pytest.raises(ValueError, match=r"for ppo\.ratio=per_dimension \(expected \(1, 8, 2\)\)"):
        step(stack, optimizer_for(stack, cfg), batch, cfg, [Hyper(1e-3, 0.0, 0.2)])


def test_the_preset_trains_with_every_switch() -> None:
    env = envs.make("FindTarget", num_areas=8, seed=0)
    cfg = dataclasses.replace(
        SMALL,
        max_grad_norm=math.inf,
        ratio="per_dimension",
        entropy="mean",
        advantage_normalization="buffer",
        adam_epsilon=1e-8,
        schedule_timing="after_buffer",
        normalizer_prior=1,
        policy_loss_stat="absolute",
    )
    policy = policy_for(env, NetworkConfig(hidden_units=16, num_layers=1, normalize=True))
    stats = train_one(env, policy, cfg, 0).stats
    env.close()
    assert stats["updates"] == 3 and stats[POLICY_LOSS] >= 0.0
    assert policy.normalizer.count.item() == 768 + 1
    assert all(torch.isfinite(p).all() for p in policy.parameters())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ratio", "per_action"),
        ("entropy", "max"),
        ("advantage_normalization", "episode"),
        ("schedule_timing", "later"),
        ("policy_loss_stat", "abs"),
        ("normalizer_prior", -1),
        ("adam_epsilon", 0.0),
        ("action_scale", 0.0),
    ],
)
def test_a_bad_switch_is_refused_naming_it(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"ppo.{field}"):
        dataclasses.replace(SMALL, **{field: value}).validate()


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_action_scale_steps_the_mean_layer_as_mlagents_units_would(kind: str) -> None:
    # ours: w with actions w.x; ML-Agents': p = 3 w with actions (p.x) / 3, torch's own optimizer
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 4, generator=g), torch.randn(16, generator=g)
    w = torch.nn.Parameter(0.1 * torch.randn(1, 4, generator=g))  # a stack of one
    p = torch.nn.Parameter(3.0 * w.detach()[0].clone())
    ours = StackOptimizer([w], kind, 1e-8, [w], 3.0)
    theirs = (
        torch.optim.Adam([p], lr=1e-2, eps=1e-8) if kind == "adam" else torch.optim.SGD([p], 1e-2)
    )
    for _ in range(5):
        ours.zero_grad()
        (x @ w[0] - y).square().mean().backward()
        ours.step([1e-2])
        theirs.zero_grad()
        ((x @ p) / 3.0 - y).square().mean().backward()
        theirs.step()
        torch.testing.assert_close(w.detach()[0], p.detach() / 3.0, rtol=1e-5, atol=1e-7)
    assert not torch.equal(w.detach(), p.detach())


def test_a_stack_steps_its_scaled_mean_layers_as_mlagents_units_would() -> None:
    # each member of a stack of three as torch's own optimizer on p = 3 w, to rounding
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 16, 4, generator=g), torch.randn(3, 16, generator=g)
    w = torch.nn.Parameter(0.1 * torch.randn(3, 4, generator=g))
    p = [torch.nn.Parameter(3.0 * w.detach()[i].clone()) for i in range(3)]
    ours = StackOptimizer([w], "adam", 1e-8, [w], 3.0)
    theirs = [torch.optim.Adam([q], lr=1e-2 * (1 + i), eps=1e-8) for i, q in enumerate(p)]
    for _ in range(5):
        w.grad = None
        ((torch.einsum("kni,ki->kn", x, w) - y).square().mean(1)).sum().backward()
        ours.step([1e-2 * (1 + i) for i in range(3)])
        for i, (q, opt) in enumerate(zip(p, theirs, strict=True)):
            opt.zero_grad()
            ((x[i] @ q) / 3.0 - y[i]).square().mean().backward()
            opt.step()
    for i in range(3):
        torch.testing.assert_close(w.detach()[i], p[i].detach() / 3.0, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("k", [1, 3])
def test_action_scale_reaches_only_the_mean_layer(k: int) -> None:
    policy = stack_of(*[_policy()] * k)
    optimizer = optimizer_for(
        policy, dataclasses.replace(SMALL, adam_epsilon=1e-8, action_scale=3.0)
    )
    *_, (weight, bias) = policy.actor
    mean_layer = {id(weight), id(bias)}
    scaled = {key for key, scale in optimizer.scale_of.items() if scale != 1.0}
    assert scaled == mean_layer and {optimizer.scale_of[key] for key in scaled} == {3.0}
    assert {s for s in optimizer_for(policy, SMALL).scale_of.values()} == {1.0}


def test_normaliser_epsilon_zero_divides_by_the_standard_deviation_itself() -> None:
    for epsilon in (0.0, 1e-8):
        env = envs.make("FindTarget", num_areas=8, seed=0)
        network = dataclasses.replace(NETWORK, normalizer_epsilon=epsilon)
        policy = policy_for(env, network, 0)
        env.close()
        normalizer = policy.normalizer
        with torch.no_grad():
            normalizer.var.fill_(4e-8)
            normalizer.mean.zero_()
        obs = torch.full((1, normalizer.mean.shape[0]), 1e-4)
        # 1e-4 / sqrt(4e-8 + epsilon): 0.5 without the epsilon, 0.4472 with it
        expected = 1e-4 / math.sqrt(4e-8 + epsilon)
        torch.testing.assert_close(policy.frozen().features(obs), torch.full_like(obs, expected))
        stack = PolicyStack([policy.state_dict()] * 2, True, epsilon, "cpu")
        features = stack.features(obs.expand(2, *obs.shape))[1]
        torch.testing.assert_close(features, torch.full_like(obs, expected))


def test_mlagents_initialization_draws_its_layers_at_mlagents_scales() -> None:
    # 1.1.0: hidden layers N(0, 1/fan_in), the mean layer 0.2 times that (0.2 / 3 in our
    # action units), the value head Xavier-uniform on (-sqrt(6 / 129), sqrt(6 / 129)), biases 0
    network = NetworkConfig(hidden_units=256, num_layers=2, initialization="mlagents")
    policy = make_policy(10, 2, network, 0)
    hidden = policy.actor[2].weight
    assert hidden.std().item() == pytest.approx(1 / 16, rel=0.02)
    assert policy.actor[-1].weight.std().item() == pytest.approx(0.2 / 3 / 16, rel=0.1)
    head = policy.critic[-1].weight
    bound = math.sqrt(6 / 257)
    assert head.abs().max().item() <= bound and head.std().item() == pytest.approx(
        bound / math.sqrt(3), rel=0.1
    )
    linears = [m for m in (*policy.actor, *policy.critic) if isinstance(m, torch.nn.Linear)]
    assert all(torch.count_nonzero(m.bias) == 0 for m in linears)
    # the default stays orthogonal with gain sqrt(2): W W^T = 2 I
    default = make_policy(10, 2, NetworkConfig(hidden_units=256, num_layers=2), 0).actor[2].weight
    torch.testing.assert_close(default @ default.T, 2 * torch.eye(256), atol=1e-4, rtol=0)


def test_an_unknown_initialization_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"network\.initialization"):
        NetworkConfig(initialization="kaiming").validate()
