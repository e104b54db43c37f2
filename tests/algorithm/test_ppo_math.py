"""GAE, PPO losses and schedules against hand-computed values."""

import pytest
import torch

from meta.algorithm.ppo.hyper import Hyper, RunSchedule, decayed
from meta.algorithm.ppo.update import clipped_policy_loss, clipped_value_loss, compute_gae
from meta.algorithm.reptile import annealed, interpolated
from meta.config.ppo import PPOConfig


def test_gae_bootstraps_timeouts_and_not_terminals() -> None:
    # t0 continues; t1 timed out (bootstrapped with V(final)=0.9); t2 ended by the task.
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.tensor([[0.5], [0.4], [0.3]])
    next_values = torch.tensor([[0.4], [0.9], [0.0]])
    boundaries = torch.tensor([[0.0], [1.0], [1.0]])
    adv, ret = compute_gae(rewards, values, next_values, boundaries, gamma=0.9, lambd=0.8)
    assert adv[:, 0].tolist() == pytest.approx([0.86 + 0.9 * 0.8 * 0.41, 0.41, 1.7])
    assert ret[:, 0].tolist() == pytest.approx([1.6552, 0.81, 2.0])


def test_gae_without_boundaries_is_discounted_lambda_sum() -> None:
    rewards = torch.tensor([[1.0], [1.0]])
    values = torch.zeros(2, 1)
    next_values = torch.zeros(2, 1)
    adv, _ = compute_gae(rewards, values, next_values, torch.zeros(2, 1), gamma=0.5, lambd=0.5)
    assert adv[:, 0].tolist() == pytest.approx([1.25, 1.0])


def _bounds(*epsilons: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's clip bounds (k, 1), 1 - eps and 1 + eps, as the update rounds them."""
    low = torch.tensor([[1.0 - e] for e in epsilons])
    return low, torch.tensor([[1.0 + e] for e in epsilons])


def test_clipped_policy_loss_hand_values() -> None:
    ratio = torch.tensor([[1.5, 0.5, 1.1]])
    adv = torch.tensor([[1.0, 1.0, -2.0]])
    # ratio 1.5, A=1 -> clip 1.2; ratio 0.5, A=1 -> min(0.5, 0.8)=0.5; ratio 1.1, A=-2 -> -2.2
    expected = -(1.2 + 0.5 - 2.2) / 3
    (loss,) = clipped_policy_loss(ratio, adv, *_bounds(0.2)).tolist()
    assert loss == pytest.approx(expected)
    # a stack of three: each member its own ratios, advantages and epsilon
    # member 1 (eps 0.1): min(1.5, 1.1) = 1.1, min(0.5, 0.9) = 0.5, min(-2.2, -2.2) = -2.2
    # member 2 (A negated): min(-1.5, -1.2) = -1.5, min(-0.5, -0.8) = -0.8, min(2.2, 2.2)
    ratios = ratio.repeat(3, 1)
    advs = torch.cat([adv, adv, -adv])
    losses = clipped_policy_loss(ratios, advs, *_bounds(0.2, 0.1, 0.2)).tolist()
    assert losses == pytest.approx([expected, -(1.1 + 0.5 - 2.2) / 3, -(-1.5 - 0.8 + 2.2) / 3])


def test_clipped_value_loss_hand_values() -> None:
    values = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0]])
    # sample 0: unclipped (2-1)^2=1, clipped V=0.2 -> (1.8)^2=3.24 -> 3.24; sample 1: 1 and 1
    epsilon = torch.tensor([[0.2]])
    (loss,) = clipped_value_loss(values, old, returns, epsilon).tolist()
    assert loss == pytest.approx((3.24 + 1.0) / 2)
    # member 1 of a stack with eps 0.5: clipped V=0.5 -> 2.25, max(1, 2.25); sample 1: 1
    two = clipped_value_loss(
        values.repeat(2, 1), old.repeat(2, 1), returns.repeat(2, 1), torch.tensor([[0.2], [0.5]])
    )
    assert two.tolist() == pytest.approx([(3.24 + 1.0) / 2, (2.25 + 1.0) / 2])


@pytest.mark.parametrize(
    ("step", "expected"), [(0, 3e-4), (50, 1.5e-4 + 0.5e-10), (100, 1e-10), (200, 1e-10)]
)
def test_linear_decay_start_middle_end_floor(step: int, expected: float) -> None:
    assert decayed("linear", 3e-4, 1e-10, step, 100) == pytest.approx(expected, rel=1e-9)


def test_constant_schedule_and_unknown_schedule() -> None:
    assert decayed("constant", 0.2, 0.1, 90, 100) == 0.2
    with pytest.raises(ValueError, match="unknown schedule"):
        decayed("cosine", 0.2, 0.1, 1, 10)


def test_meta_annealing_first_middle_last_and_floor() -> None:
    assert annealed(0.2, 0, 10, 0.1) == 0.2
    assert annealed(0.2, 5, 10, 0.01) == pytest.approx(0.1)
    assert annealed(0.2, 9, 10, 0.1) == 0.1  # 0.02 is below the floor
    assert interpolated(1.0, 0.0, 0, 4) == 1.0
    assert interpolated(1.0, 0.0, 2, 4) == 0.5
    assert interpolated(1.0, 0.0, 3, 4) == 0.25


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_size", 20480, "ppo.batch_size"),
        ("max_steps", 0, "ppo.max_steps"),
        ("num_epoch", -1, "ppo.num_epoch"),
        ("learning_rate", 0.0, "ppo.learning_rate"),
        ("beta_schedule", "cosine", "ppo.beta_schedule"),
        ("optimizer", "rmsprop", "ppo.optimizer"),
    ],
)
def test_bad_ppo_config_names_the_field(field: str, value: object, message: str) -> None:
    cfg = PPOConfig(**{field: value})
    with pytest.raises(ValueError, match=message) as info:
        cfg.validate()
    assert "\n" not in str(info.value)


def test_run_schedule_decays_to_floor_at_the_run_end_as_mlagents() -> None:
    # ML-Agents' DecayedValue: (x0 - floor) * (1 - s/S) + floor, across the run's chunks.
    start, floors = Hyper(3e-4, 5e-3, 0.2), Hyper(1e-10, 1e-5, 0.1)
    halfway = RunSchedule(start, floors, done=500, total=1000).at(0)
    assert halfway.epsilon == pytest.approx(0.15)
    assert halfway.beta == pytest.approx((5e-3 - 1e-5) / 2 + 1e-5)
    assert halfway.learning_rate == pytest.approx((3e-4 - 1e-10) / 2 + 1e-10)
    end = RunSchedule(start, floors, done=900, total=1000).at(100)
    assert (end.learning_rate, end.beta, end.epsilon) == pytest.approx((1e-10, 1e-5, 0.1))
