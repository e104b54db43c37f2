"""The switches to ML-Agents 1.1.0's PPO (`ppo=mlagents`), each checked by hand-computed values."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import Minibatch, clipped_policy_loss, gradient_step, make_optimizer
from meta.algorithm.ppo.optim import SGD, Adam, Optimizer
from meta.algorithm.ppo.policy import Normalizer, Policy, gaussian_log_prob, make_policy
from meta.algorithm.ppo.rollout import Collector
from meta.algorithm.ppo.train import PPORun, policy_for, train
from meta.algorithm.ppo.update import _minibatches, buffer_normalised, dimension_log_probs
from meta.observe.tags import LEARNING_RATE, POLICY_LOSS

NETWORK = NetworkConfig(hidden_units=16, num_layers=1)
SMALL = PPOConfig(batch_size=128, buffer_size=256, max_steps=768, num_epoch=2, time_horizon=16)


def _policy() -> Policy:
    env = envs.make("FindTarget", num_areas=8, seed=0)
    policy = policy_for(env, NETWORK, 0)
    env.close()
    return policy


def test_per_dimension_ratio_clips_each_dimension_and_averages() -> None:
    old = torch.zeros(2, 2)
    new = torch.log(torch.tensor([[1.5, 0.9], [1.5, 0.5]]))
    adv = torch.tensor([1.0, -2.0])
    # sample 1: min(1.5, 1.2) = 1.2 and min(0.9, 0.9) = 0.9; sample 2 (A = -2):
    # min(-3, -2.4) = -3 and min(-1, -1.6) = -1.6; the mean of the four, negated
    expected = -(1.2 + 0.9 - 3.0 - 1.6) / 4
    assert clipped_policy_loss(new, old, adv, 0.2).item() == pytest.approx(expected)
    # the joint ratios, 1.35 and 0.75: min(1.35, 1.2) = 1.2 and min(-1.5, -1.6) = -1.6
    joint = clipped_policy_loss(new.sum(-1), old.sum(-1), adv, 0.2).item()
    assert joint == pytest.approx(-(1.2 - 1.6) / 2)


def test_mean_entropy_is_mlagents_over_dimensions() -> None:
    policy = _policy()
    with torch.no_grad():
        policy.log_std.copy_(torch.tensor([0.0, math.log(2.0)]))
    two_pi_e = 2.0 * math.pi * math.e
    by_hand = (0.5 * math.log(two_pi_e + 1e-7) + 0.5 * math.log(4.0 * two_pi_e + 1e-7)) / 2
    assert policy.mean_entropy().item() == pytest.approx(by_hand, rel=1e-6)
    assert policy.entropy().item() == pytest.approx(math.log(two_pi_e) + math.log(2.0), rel=1e-6)


def test_buffer_normalisation_is_population_std_once_before_the_epochs() -> None:
    adv = torch.tensor([1.0, 2.0, 3.0, 4.0])
    # mean 2.5, population variance 1.25
    expected = (adv - 2.5) / (math.sqrt(1.25) + 1e-10)
    torch.testing.assert_close(buffer_normalised(adv), expected)
    n = 256
    buffer = Minibatch(
        *(torch.arange(float(n)).unsqueeze(-1).repeat(1, k) for k in (3, 2)),
        *(torch.arange(float(n)) for _ in range(4)),
    )
    cfg = dataclasses.replace(SMALL, advantage_normalization="buffer")
    for batch in _minibatches(buffer, cfg, torch.Generator().manual_seed(0)):
        # rows are left as given: each row's advantage is still its index
        torch.testing.assert_close(batch.advantages, batch.returns)
    per_minibatch = next(_minibatches(buffer, SMALL, torch.Generator().manual_seed(0)))
    assert per_minibatch.advantages.mean().abs().item() < 1e-5


def test_adam_epsilon_is_the_configured_one() -> None:
    policy = _policy()
    assert make_optimizer(policy, 3e-4, "adam", 1e-8).group["eps"] == 1e-8
    env = envs.make("FindTarget", num_areas=8, seed=0)
    optimizer, _, _ = PPORun(env, policy, dataclasses.replace(SMALL, adam_epsilon=1e-8), 0).begin()
    env.close()
    assert optimizer.group["eps"] == 1e-8


def test_after_buffer_timing_reads_the_schedule_after_the_buffers_steps() -> None:
    seen: list[int] = []
    env = envs.make("FindTarget", num_areas=8, seed=0)
    updates: list[dict[str, float]] = []

    def schedule(steps: int) -> Hyper:
        seen.append(steps)
        return Hyper(1e-3 * (1 + steps), 5e-3, 0.2)

    cfg = dataclasses.replace(SMALL, schedule_timing="after_buffer")
    policy = policy_for(env, NETWORK)
    train(PPORun(env, policy, cfg, 0, schedule=schedule, on_update=lambda _, u: updates.append(u)))
    env.close()
    assert seen[1::2] == [256, 512, 768]
    assert [u[LEARNING_RATE] for u in updates] == [1e-3 * (1 + s) for s in (256, 512, 768)]


def test_normaliser_prior_is_mlagents_one_observation_at_mean_0_variance_1() -> None:
    normalizer = Normalizer(1)
    normalizer.prime(1)
    normalizer.update(torch.tensor([[2.0], [4.0]]))
    # ML-Agents: steps 1 -> 3, mean 0 + (2 + 4) / 3 = 2, running variance
    # 1 + (2 - 2)(2 - 0) + (4 - 2)(4 - 0) = 9, divided by its steps: 3
    assert (normalizer.count.item(), normalizer.mean.item(), normalizer.var.item()) == (
        3.0,
        pytest.approx(2.0),
        pytest.approx(3.0),
    )
    normalizer.prime(1)  # statistics already gathered are kept
    assert normalizer.count.item() == 3.0
    fresh = Normalizer(1)
    fresh.prime(0)
    fresh.update(torch.tensor([[2.0], [4.0]]))
    assert (fresh.count.item(), fresh.mean.item(), fresh.var.item()) == (2.0, 3.0, 1.0)


def test_per_dimension_log_probs_are_the_acting_policys_and_sum_to_its_joint() -> None:
    env = envs.make("FindTarget", num_areas=8, seed=1)
    policy = policy_for(env, NETWORK, 0)
    collector = Collector(env, BEHAVIOR_NAME, policy, torch.Generator().manual_seed(0), 16)
    rollout = collector.collect(32)
    env.close()
    per_dimension = dimension_log_probs(policy, rollout).log_probs
    assert per_dimension.shape == (32, 8, 2)
    torch.testing.assert_close(per_dimension.sum(-1), rollout.log_probs, rtol=1e-5, atol=1e-5)


def test_absolute_policy_loss_stat_reports_its_size() -> None:
    policy = _policy()
    n, obs = 8, policy.normalizer.mean.shape[0]
    x = torch.zeros(n, obs)
    actions = torch.zeros(n, 2)
    with torch.no_grad():
        old = gaussian_log_prob(actions, policy.mean_from(x), policy.log_std)
    values = torch.zeros(n)
    adv = torch.ones(n)
    batch = Minibatch(x, actions, old, values, adv, values)
    signed = gradient_step(policy, make_optimizer(policy, 1e-9), batch, SMALL, 0.2, 0.0)
    absolute_cfg = dataclasses.replace(SMALL, policy_loss_stat="absolute")
    absolute = gradient_step(policy, make_optimizer(policy, 1e-9), batch, absolute_cfg, 0.2, 0.0)
    # old log-probabilities are the policy's own: ratio 1, loss -mean(A) = -1
    assert signed[0] == pytest.approx(-1.0)
    assert absolute[0] == pytest.approx(1.0)


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
    stats = train(PPORun(env, policy, cfg, 0))
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
    w = torch.nn.Parameter(0.1 * torch.randn(4, generator=g))
    p = torch.nn.Parameter(3.0 * w.detach().clone())
    ours: Optimizer = (
        Adam([w], lr=1e-2, eps=1e-8, scaled=[w], scale=3.0)
        if kind == "adam"
        else SGD([w], lr=1e-2, scaled=[w], scale=3.0)
    )
    theirs = (
        torch.optim.Adam([p], lr=1e-2, eps=1e-8) if kind == "adam" else torch.optim.SGD([p], 1e-2)
    )
    for _ in range(5):
        for opt, mean in ((ours, x @ w), (theirs, (x @ p) / 3.0)):
            opt.zero_grad()
            (mean - y).square().mean().backward()
            opt.step()
        torch.testing.assert_close(w.detach(), p.detach() / 3.0, rtol=1e-5, atol=1e-7)
    assert not torch.equal(w.detach(), p.detach())


def test_action_scale_reaches_only_the_mean_layer() -> None:
    policy = _policy()
    optimizer = make_optimizer(policy, 3e-4, "adam", 1e-8, 3.0)
    mean_layer = {id(policy.actor[-1].weight), id(policy.actor[-1].bias)}
    assert optimizer.scaled == mean_layer and optimizer.scale == 3.0
    assert make_optimizer(policy, 3e-4).scaled == set()


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
        torch.testing.assert_close(normalizer(obs), torch.full_like(obs, expected))
        torch.testing.assert_close(policy.frozen().features(obs), normalizer(obs))


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
