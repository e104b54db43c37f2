"""A meta-step's inner trainings: the tasks it draws, the PPO jobs over them, crash retries."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

from envs.interface import TaskEnvironment
from meta.algorithm import reptile
from meta.algorithm.ppo.hyper import RunSchedule
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.ppo.train import Hyper, InnerResult, OptimizerState, inner_train
from meta.config import Config
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
        self,
        k: int,
        theta: dict[str, torch.Tensor],
        tasks: list[reptile.Task],
        hyper: Hyper,
        optimizer_state: OptimizerState | None = None,
    ) -> list[InnerResult]:
        """The meta-step's trainings; a crashed build is restarted and the step retried.

        With `carries_optimizer`, the trainings continue Adam from `optimizer_state`, one
        after the other (each from the state the previous one left); otherwise each starts
        a fresh Adam.
        """
        crash_types = self.plan.pool.crash_types()
        while True:
            try:
                return self._train_once(k, theta, tasks, hyper, optimizer_state)
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

    @property
    def carries_optimizer(self) -> bool:
        """Whether Adam's state carries over between trainings (always for joint and single)."""
        meta = self.cfg.meta
        return meta.algorithm != "reptile" or meta.inner_optimizer == "carry"

    def _train_once(
        self,
        k: int,
        theta: dict[str, torch.Tensor],
        tasks: list[reptile.Task],
        hyper: Hyper,
        optimizer_state: OptimizerState | None,
    ) -> list[InnerResult]:
        cfg = self.cfg
        schedule: RunSchedule | None = None
        if cfg.meta.algorithm == "reptile":
            jobs = [(reptile.inner_seed(cfg.seed, k, i), [t], cfg.ppo) for i, t in enumerate(tasks)]
        else:
            # joint and single continue theta and Adam for reptile's env-step budget: each
            # chunk picks up the run's linear schedules where the last one stopped, so the
            # whole run is one linearly-annealed PPO training, as ML-Agents would run it.
            chunk = replace(cfg.ppo, max_steps=cfg.ppo.max_steps * cfg.meta.meta_batch_size)
            jobs = [(reptile.inner_seed(cfg.seed, k, 0), tasks, chunk)]
            schedule = _run_schedule(cfg, k, chunk.max_steps)
        state = optimizer_state if self.carries_optimizer else None
        results = []
        for seed, group, ppo in jobs:
            env = self._env(group, seed)
            try:
                with self.timers.scope("inner_training"):
                    result = inner_train(
                        env,
                        theta,
                        cfg.network,
                        ppo,
                        seed=seed,
                        hyper=hyper,
                        stats_channel=env.stats_channel,
                        timers=self.timers,
                        device=cfg.torch_device,
                        optimizer_state=state,
                        schedule=None if schedule is None else schedule.at,
                    )
            finally:
                self.plan.pool.release(env)
            results.append(result)
            if self.carries_optimizer:
                state = result.optimizer_state
        return results

    def _env(self, tasks: list[reptile.Task], seed: int) -> TaskEnvironment:
        """One task's environment, or all tasks' areas side by side for joint training."""
        if len(tasks) > 1:
            return self.plan.pool.concat([(t.family, t.params) for t in tasks], seed)
        return self.plan.pool.env(tasks[0].family, tasks[0].params, seed)


def _run_schedule(cfg: Config, k: int, chunk_steps: int) -> RunSchedule:
    """joint and single: chunk k of one run of meta.steps chunks, annealed over all of it."""
    meta, start = cfg.meta, Hyper.of(cfg.ppo)
    if not meta.anneal:
        return RunSchedule(start, start, 0, 1)  # the floors are the values: constant
    floors = Hyper(meta.learning_rate_floor, meta.beta_floor, meta.epsilon_floor)
    return RunSchedule(start, floors, k * chunk_steps, meta.steps * chunk_steps)
