"""Reptile's weight arithmetic, schedules and task sampling against hand values."""

import numpy as np
import pytest
import torch

from meta.algorithm.reptile import (
    TaskSampler,
    average,
    distance,
    inner_hyper,
    interpolate,
    outer_step_size,
    reptile_update,
    task_rng,
)
from meta.algorithm.request import Task
from meta.config import MetaConfig, TaskConfig
from meta.config.ppo import PPOConfig


def w(*values: float) -> dict[str, torch.Tensor]:
    return {
        "a": torch.tensor(values[:2], dtype=torch.float32),
        "b": torch.tensor(values[2:], dtype=torch.float32),
    }


def test_average_and_interpolate_hand_values() -> None:
    mean = average([w(1, 2, 3), w(3, 4, 5)])
    assert mean["a"].tolist() == [2, 3] and mean["b"].tolist() == [4]
    step = interpolate(w(0, 0, 0), w(4, 8, -4), 0.25)
    assert step["a"].tolist() == [1, 2] and step["b"].tolist() == [-1]


def test_reptile_update_moves_towards_the_mean_of_the_trained_weights() -> None:
    theta = w(0, 0, 0)
    new = reptile_update(theta, [w(2, 0, 0), w(0, 2, 4)], 0.5)
    assert new["a"].tolist() == [0.5, 0.5] and new["b"].tolist() == [1.0]


def test_outer_lr_one_replaces_theta_by_phi_exactly() -> None:
    theta, phi = w(0.1, 0.2, 0.3), w(0.7, -0.3, 1e-8)
    new = reptile_update(theta, [phi], 1.0)
    assert all(torch.equal(new[k], phi[k]) for k in phi)


def test_distance_ignores_normaliser_statistics() -> None:
    a = {"actor.w": torch.tensor([3.0]), "normalizer.count": torch.tensor(100.0)}
    b = {"actor.w": torch.tensor([0.0]), "normalizer.count": torch.tensor(0.0)}
    assert distance(a, b) == pytest.approx(3.0)


def test_outer_and_inner_schedules_first_middle_last() -> None:
    meta = MetaConfig(steps=4, outer_lr=0.8, outer_lr_final=0.0)
    assert [outer_step_size(meta, k) for k in (0, 2, 3)] == pytest.approx([0.8, 0.4, 0.2])
    ppo = PPOConfig(learning_rate=1e-3, beta=1e-2, epsilon=0.2)
    first, middle, last = (inner_hyper(ppo, meta, k) for k in (0, 2, 3))
    assert (first.learning_rate, first.beta, first.epsilon) == (1e-3, 1e-2, 0.2)
    assert middle.learning_rate == pytest.approx(5e-4) and middle.beta == pytest.approx(5e-3)
    assert middle.epsilon == pytest.approx(0.1)
    assert last.epsilon == 0.1  # 0.05 floored at ML-Agents' 0.1
    assert last.learning_rate == pytest.approx(2.5e-4)


def test_sequential_setting_keeps_outer_lr_at_one() -> None:
    meta = MetaConfig(steps=10, outer_lr=1.0)
    assert all(outer_step_size(meta, k) == 1.0 for k in range(10))


def test_task_sampling_follows_the_weights() -> None:
    sampler = TaskSampler([TaskConfig("FindTarget", 0.25), TaskConfig("CarryObject", 0.75)])
    rng = np.random.default_rng(0)
    draws = [sampler.sample(rng).family for _ in range(4000)]
    share = draws.count("CarryObject") / len(draws)
    # binomial standard error at p=0.75, n=4000 is 0.0068; allow 4 of them
    assert abs(share - 0.75) < 0.028

    # every draw comes from the generator given: the same seed, the same tasks and parameters
    def forty(seed: int) -> list[Task]:
        given = np.random.default_rng(seed)
        return [sampler.sample(given) for _ in range(40)]

    assert forty(5) == forty(5) and len({repr(task.params) for task in forty(5)}) == 40


def test_default_distribution_samples_both_families_evenly() -> None:
    sampler = TaskSampler(MetaConfig().tasks)
    draws = [sampler.sample(task_rng(0, k)).family for k in range(2000)]
    assert abs(draws.count("CarryObject") / 2000 - 0.5) < 0.045


def test_task_overrides_fix_or_range_parameters() -> None:
    sampler = TaskSampler(
        [TaskConfig("FindTarget", 1.0, {"agent_speed": 0.3, "motor_rotation": [10, 20]})]
    )
    rng = np.random.default_rng(1)
    for _ in range(50):
        params = sampler.sample(rng).params
        assert params["agent_speed"] == 0.3 and 10 <= params["motor_rotation"] <= 20


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([TaskConfig("Jump", 1.0)], "unknown task 'Jump'"),
        ([TaskConfig("FindTarget", 1.0, {"gravity": 1})], "unknown parameter 'gravity'"),
    ],
)
def test_bad_tasks_are_named(tasks: list[TaskConfig], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TaskSampler(tasks)
