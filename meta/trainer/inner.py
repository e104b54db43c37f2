"""A meta-step's inner trainings: the tasks it draws, the PPO jobs over them, crash retries."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

from envs.interface import TaskEnvironment
from meta.algorithm import reptile
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.ppo.train import Hyper, InnerResult, inner_train
from meta.trainer.preflight import Plan

log = logging.getLogger(__name__)


class BuildsExhausted(RuntimeError):
    """Builds crashed more often than env.max_restarts allows (one line)."""


class InnerTrainings:
    """Draws each meta-step's tasks and trains them from theta; counts restarts of builds."""

    def __init__(self, plan: Plan, timers: Timers) -> None:
        self.plan, self.cfg, self.timers = plan, plan.cfg, timers
        self.restarts = 0

    def tasks(self, rng: np.random.Generator, env_params: dict[str, float]) -> list[reptile.Task]:
        """The meta-step's tasks: one per inner training (joint: the tasks it trains together)."""
        meta = self.cfg.meta
        count = {"single": 1, "joint": meta.joint_tasks}.get(meta.algorithm, meta.meta_batch_size)
        return [self._task(rng, env_params) for _ in range(count)]

    def _task(self, rng: np.random.Generator, env_params: dict[str, float]) -> reptile.Task:
        task = self.plan.sampler.sample(rng)
        if self.cfg.meta.algorithm == "single":
            # plain PPO keeps one task for the whole run, drawn once from the seed
            task = self.plan.sampler.sample(np.random.default_rng([self.cfg.seed, 0x51A6]))
        return reptile.Task(task.family, {**task.params, **env_params})

    def train(
        self, k: int, theta: dict[str, torch.Tensor], tasks: list[reptile.Task], hyper: Hyper
    ) -> list[InnerResult]:
        """The meta-step's trainings; a crashed build is restarted and the step retried."""
        crash_types = self.plan.pool.crash_types()
        while True:
            try:
                return self._train_once(k, theta, tasks, hyper)
            except crash_types as crash:
                self.restarts += 1
                if self.restarts > self.cfg.env.max_restarts:
                    raise BuildsExhausted(
                        f"builds crashed {self.restarts} times (env.max_restarts="
                        f"{self.cfg.env.max_restarts}); last: {crash}"
                    ) from crash
                log.warning(
                    "A build crashed in meta-step %d (%s); restarting it and retrying "
                    "the meta-step from theta",
                    k,
                    crash,
                )
                self.plan.pool.restart_all()

    def _train_once(
        self, k: int, theta: dict[str, torch.Tensor], tasks: list[reptile.Task], hyper: Hyper
    ) -> list[InnerResult]:
        cfg = self.cfg
        if cfg.meta.algorithm == "reptile":
            jobs = [(reptile.inner_seed(cfg.seed, k, i), [t], cfg.ppo) for i, t in enumerate(tasks)]
        else:
            # joint and single continue theta itself for reptile's env-step budget, with
            # constant schedules inside each chunk: annealing across chunks then makes the
            # whole run one linearly-annealed PPO training, as ML-Agents would run it.
            chunk = replace(
                cfg.ppo,
                max_steps=cfg.ppo.max_steps * cfg.meta.meta_batch_size,
                learning_rate_schedule="constant",
                beta_schedule="constant",
                epsilon_schedule="constant",
            )
            jobs = [(reptile.inner_seed(cfg.seed, k, 0), tasks, chunk)]
        results = []
        for seed, group, ppo in jobs:
            env = self._env(group, seed)
            try:
                with self.timers.scope("inner_training"):
                    results.append(
                        inner_train(
                            env,
                            theta,
                            cfg.network,
                            ppo,
                            seed=seed,
                            hyper=hyper,
                            stats_channel=env.stats_channel,
                            timers=self.timers,
                            device=cfg.torch_device,
                        )
                    )
            finally:
                self.plan.pool.release(env)
        return results

    def _env(self, tasks: list[reptile.Task], seed: int) -> TaskEnvironment:
        """One task's environment, or all tasks' areas side by side for joint training."""
        if len(tasks) > 1:
            return self.plan.pool.concat([(t.family, t.params) for t in tasks], seed)
        return self.plan.pool.env(tasks[0].family, tasks[0].params, seed)
