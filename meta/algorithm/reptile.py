"""Reptile on state_dicts, as the paper reads, and what every meta-learner is.

Task sampling, the schedules across meta-steps and interpolation; `MetaLearner`, the trainings a
meta-step needs, how θ moves and what carries on (requests of a chain, `chained`, run one after
the other, each continuing what the previous one left, `continued`; the others may run side by
side); `Reptile`. Subclasses override what differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import torch

import envs
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.request import OptimizerState, SelfPlayState, Task, TrainRequest, TrainResult
from meta.algorithm.selfplay.ghost import elo_only, run_state_after
from meta.config import Config, MetaConfig, TaskConfig
from meta.config.ppo import PPOConfig, SelfPlayConfig

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


class MetaLearner:
    """Independent inner trainings from θ, one per task of the meta-batch; `update` moves θ."""

    name: ClassVar[str]
    continuous: ClassVar[bool] = False
    """One continuous PPO run cut into meta-steps: the ghost carries over as Adam does."""
    meta_gradient: ClassVar[bool] = False
    """Whether each training also gives PPO's gradient at its trained weights."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    @classmethod
    def check(cls, cfg: Config) -> None:
        """ValueError for what this learner cannot train (before anything is written)."""

    @property
    def chained(self) -> bool:
        """Whether Adam's state carries from training to training (meta.inner_optimizer=carry)."""
        return self.cfg.meta.inner_optimizer == "carry"

    def tasks(
        self, sampler: TaskSampler, rng: np.random.Generator, env_params: dict[str, float]
    ) -> list[Task]:
        """The meta-step's tasks: one per inner training."""
        batch = self.cfg.meta.meta_batch_size
        return [sampler.sample(rng).with_params(env_params) for _ in range(batch)]

    def requests(
        self,
        k: int,
        theta: Weights,
        tasks: list[Task],
        hyper: Hyper,
        self_play_state: SelfPlayState | None,
    ) -> list[TrainRequest]:
        """One training from θ per task, each with its own seed, games from the run's ELO."""
        return [
            self._request(theta, (task,), inner_seed(self.cfg.seed, k, i), hyper, self_play_state)
            for i, task in enumerate(tasks)
        ]

    def _request(
        self,
        theta: Weights,
        tasks: tuple[Task, ...],
        seed: int,
        hyper: Hyper,
        self_play_state: SelfPlayState | None,
    ) -> TrainRequest:
        cfg = self.cfg
        play = self_play_state if self.continuous else elo_only(self_play_state)
        return TrainRequest(
            tasks,
            theta,
            seed,
            cfg.ppo,
            cfg.network,
            hyper,
            device=cfg.torch_device,
            self_play_state=play,
            returns_optimizer=self.chained,
            meta_gradient=self.meta_gradient,
        )

    def continued(self, request: TrainRequest, previous: TrainResult) -> TrainRequest:
        """The next request of a chain, continuing Adam (and a continuous run's ghost)."""
        play = previous.self_play_state if self.continuous else request.self_play_state
        return request.carrying(optimizer_state=previous.optimizer_state, self_play_state=play)

    def update(self, theta: Weights, results: list[TrainResult], outer_lr: float) -> Weights:
        """The new θ from the trainings' results and the outer step size."""
        raise NotImplementedError

    def optimizer_after(self, results: list[TrainResult]) -> OptimizerState | None:
        """Adam's state the next meta-step continues (None: each starts a fresh one)."""
        return results[-1].optimizer_state if self.chained else None

    def self_play_after(
        self, state: SelfPlayState | None, results: list[TrainResult]
    ) -> SelfPlayState | None:
        """The run's ELO (and, for a continuous run, the ghost) after this meta-step."""
        initial = (self.cfg.ppo.self_play or SelfPlayConfig()).initial_elo
        after = [r.self_play_state for r in results]
        return run_state_after(state, after, self.continuous, initial)


class Reptile(MetaLearner):
    """θ <- θ + ε·(mean_i φ_i − θ), each φ_i an inner training from θ (Nichol et al. 2018)."""

    name = "reptile"

    def update(self, theta: Weights, results: list[TrainResult], outer_lr: float) -> Weights:
        """Interpolate θ towards the trained weights."""
        return reptile_update(theta, [r.weights for r in results], outer_lr)
