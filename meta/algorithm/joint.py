"""One PPO run cut into meta-steps: the multi-task baseline `Joint`, the scratch one `Single`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import envs
from meta.algorithm.ppo.hyper import Hyper, RunSchedule
from meta.algorithm.reptile import MetaLearner, TaskSampler, Weights, inner_seed
from meta.algorithm.request import SelfPlayState, Task, TrainRequest, TrainResult
from meta.config import Config

_SINGLE = 0x51A6


class Joint(MetaLearner):
    """Each meta-step trains meta.joint_tasks tasks at once (their areas side by side), from
    the weights and Adam the last one left, for Reptile's env-step budget: θ is the result."""

    name = "joint"
    continuous = True

    @classmethod
    def check(cls, cfg: Config) -> None:
        """Areas split across tasks need native environments; a game cannot share its areas."""
        if cfg.env.backend != "native":
            raise ValueError("meta=joint splits areas across tasks and needs env.backend=native")
        games = [t.name for t in cfg.meta.tasks if envs.family(t.name).adversarial]
        if games and cfg.ppo.self_play is not None:
            raise ValueError(
                f"meta=joint cannot put the game {games[0]} beside other tasks' areas: "
                "use meta=reptile or meta=single"
            )

    @property
    def chained(self) -> bool:
        """Always: one PPO run, optimizer state included."""
        return True

    def tasks(
        self, sampler: TaskSampler, rng: np.random.Generator, env_params: dict[str, float]
    ) -> list[Task]:
        """The tasks trained together this meta-step."""
        count = self.cfg.meta.joint_tasks
        return [sampler.sample(rng).with_params(env_params) for _ in range(count)]

    def requests(
        self,
        k: int,
        theta: Weights,
        tasks: list[Task],
        hyper: Hyper,
        self_play_state: SelfPlayState | None,
    ) -> list[TrainRequest]:
        """One chunk of the run: its linear schedules pick up where the last chunk stopped
        (chunk k of one run of meta.steps chunks, annealed over all of it)."""
        cfg, meta, start = self.cfg, self.cfg.meta, Hyper.of(self.cfg.ppo)
        chunk = replace(cfg.ppo, max_steps=cfg.ppo.max_steps * meta.meta_batch_size)
        schedule = RunSchedule(start, start, 0, 1)  # not annealed: constant
        if meta.anneal:
            floors = Hyper(meta.learning_rate_floor, meta.beta_floor, meta.epsilon_floor)
            steps = chunk.max_steps
            schedule = RunSchedule(start, floors, k * steps, meta.steps * steps)
        request = self._request(
            theta, tuple(tasks), inner_seed(cfg.seed, k, 0), hyper, self_play_state
        )
        return [replace(request, ppo=chunk, schedule=schedule)]

    def update(self, theta: Weights, results: list[TrainResult], outer_lr: float) -> Weights:
        """The trained weights: no interpolation."""
        return results[0].weights


class Single(Joint):
    """One task for the whole run, drawn once from the seed; otherwise joint's one PPO run."""

    name = "single"

    @classmethod
    def check(cls, cfg: Config) -> None:
        """Any backend, games too (one task has its areas to itself)."""

    def tasks(
        self, sampler: TaskSampler, rng: np.random.Generator, env_params: dict[str, float]
    ) -> list[Task]:
        """The run's one task, the same every meta-step."""
        sampler.sample(rng)  # the meta-step's draw, as every learner makes it
        task = sampler.sample(np.random.default_rng([self.cfg.seed, _SINGLE]))
        return [task.with_params(env_params)]
