"""Reptile on state_dicts: task sampling, schedules and interpolation, as the paper reads."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

import envs
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.weights import Weights
from meta.config import MetaConfig, TaskConfig
from meta.config.ppo import PPOConfig

NORMALIZER_PREFIX = "normalizer."


def average(weights: Sequence[Mapping[str, torch.Tensor]]) -> Weights:
    """Element-wise mean of several state_dicts."""
    return {key: torch.stack([w[key] for w in weights]).mean(0) for key in weights[0]}


def interpolate(
    theta: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor], step_size: float
) -> Weights:
    """theta + step_size * (target - theta); step_size 1 returns target exactly."""
    if step_size == 1.0:
        return {key: target[key].clone() for key in theta}
    return {key: theta[key] + step_size * (target[key] - theta[key]) for key in theta}


def distance(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """Euclidean norm of the difference of the weights (normaliser statistics left out)."""
    keys = [k for k in a if not k.startswith(NORMALIZER_PREFIX)]
    total = torch.zeros((), dtype=torch.float64)
    for key in keys:
        total += (a[key].double() - b[key].double()).square().sum()
    return float(total.sqrt())


@dataclass(frozen=True)
class Task:
    """One sampled task: a family and its parameter values."""

    family: str
    params: dict[str, float]

    def with_params(self, params: Mapping[str, float]) -> Task:
        """The task with some parameters set (the curriculum's of a meta-step)."""
        return Task(self.family, {**self.params, **params})

    def params_json(self) -> str:
        """Parameters as a compact JSON object (one CSV cell)."""
        return json.dumps(self.params, sort_keys=True, separators=(",", ":"))


class TaskSampler:
    """Families by weight, then each family's parameters from its ranges, with overrides."""

    def __init__(self, tasks: Sequence[TaskConfig], split: str = "train") -> None:
        self.tasks = list(tasks)
        self.split = split
        for i, task in enumerate(self.tasks):
            if task.name not in envs.FAMILIES:
                raise ValueError(
                    f"meta.tasks[{i}]: unknown task {task.name!r} "
                    f"(known: {', '.join(sorted(envs.FAMILIES))})"
                )
            names = set(envs.family(task.name).param_names)
            unknown = sorted(set(task.params) - names)
            if unknown:
                raise ValueError(f"meta.tasks[{i}] ({task.name}): unknown parameter {unknown[0]!r}")
            for name, value in task.params.items():
                _check_param(f"meta.tasks[{i}] ({task.name}).params.{name}", task.name, name, value)
        weights = np.array([t.weight for t in self.tasks], np.float64)
        self.probabilities = weights / weights.sum()

    def patches(self) -> list[dict[str, int]]:
        """The patches of a one-family sampler's split, over the parameters it does not fix."""
        (task,) = self.tasks
        return envs.family(task.name).patches(self.split, task.params)

    def sample(self, rng: np.random.Generator, patch: Mapping[str, int] | None = None) -> Task:
        """Draw one task (within `patch`, for a one-family sampler, if given)."""
        task = self.tasks[int(rng.choice(len(self.tasks), p=self.probabilities))]
        params = envs.family(task.name).sample_params(rng, self.split, patch)
        for name, value in task.params.items():
            if isinstance(value, Sequence) and not isinstance(value, str):
                low, high = (float(v) for v in value)
                params[name] = float(rng.uniform(low, high))
            else:
                params[name] = float(value)
        return Task(task.name, params)


def _check_param(where: str, family: str, name: str, value: object) -> None:
    """A fixed value or a [low, high] range within the family's bounds; ValueError otherwise."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 2:
            raise ValueError(f"{where}: a range is [low, high], got {len(value)} values")
        low, high = value
        for end in (low, high):
            _check_param(where, family, name, end)
        if not low <= high:
            raise ValueError(f"{where}: range [{low}, {high}] is reversed (low > high)")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number or a [low, high] range, got {value!r}")
    try:
        envs.family(family).validate({name: value})
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def annealed(initial: float, meta_step: int, meta_steps: int, floor: float) -> float:
    """Across meta-steps: x_k = x_0 * (1 - k/K), never below `floor`."""
    return max(initial * (1.0 - meta_step / meta_steps), floor)


def interpolated(start: float, end: float, meta_step: int, meta_steps: int) -> float:
    """Linear interpolation from `start` at k=0 towards `end` at k=K (Reptile's frac_done)."""
    frac_done = meta_step / meta_steps
    return frac_done * end + (1.0 - frac_done) * start


def inner_hyper(ppo: PPOConfig, meta: MetaConfig, meta_step: int) -> Hyper:
    """The inner training's starting learning rate, beta and epsilon at meta-step k."""
    if not meta.anneal:
        return Hyper.of(ppo)
    k, total = meta_step, meta.steps
    return Hyper(
        annealed(ppo.learning_rate, k, total, meta.learning_rate_floor),
        annealed(ppo.beta, k, total, meta.beta_floor),
        annealed(ppo.epsilon, k, total, meta.epsilon_floor),
    )


def outer_step_size(meta: MetaConfig, meta_step: int) -> float:
    """Reptile's epsilon at meta-step k, linear from outer_lr towards outer_lr_final."""
    return interpolated(meta.outer_lr, meta.final_outer_lr, meta_step, meta.steps)


def task_rng(seed: int, meta_step: int) -> np.random.Generator:
    """The generator of meta-step k: a pure function of (seed, k), so resume needs no state."""
    return np.random.default_rng([seed, meta_step, 0x7A5C])


def inner_seed(seed: int, meta_step: int, index: int) -> int:
    """Seed of the index-th inner training of meta-step k."""
    return int(np.random.SeedSequence([seed, meta_step, index, 0x1EED]).generate_state(1)[0])


def reptile_update(theta: Weights, trained: Sequence[Weights], step_size: float) -> Weights:
    """theta <- theta + epsilon * (mean_i phi_i - theta)."""
    return interpolate(theta, average(trained) if len(trained) > 1 else trained[0], step_size)
