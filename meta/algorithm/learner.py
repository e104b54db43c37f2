"""What a meta-learner is (the trainings a meta-step needs, how θ moves, what carries on); Reptile.

Requests of a chain (`chained`) run one after the other, each continuing what the previous one
left (`continued`); the others may run side by side. Subclasses override what differs.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.reptile import Task, TaskSampler, Weights, inner_seed, reptile_update
from meta.algorithm.request import OptimizerState, SelfPlayState, TrainRequest, TrainResult
from meta.algorithm.selfplay.ghost import elo_only, run_state_after
from meta.config import Config
from meta.config.ppo import SelfPlayConfig


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
