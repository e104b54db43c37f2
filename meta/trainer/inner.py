"""A meta-step's inner trainings: the tasks it draws, the PPO jobs over them, crash retries.

The jobs are picklable descriptions (meta.runtime.jobs) that an executor runs: in this process
(`runtime=local`) or on Ray actors (`runtime=ray`). Reptile's trainings are independent and run
side by side; trainings that chain Adam's state (meta.inner_optimizer=carry, meta=joint,
meta=single) each continue from the previous one, so they run one after the other.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from meta.algorithm import reptile
from meta.algorithm.fomaml import FOMAML
from meta.algorithm.inner import InnerResult, OptimizerState, SelfPlayState
from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper, RunSchedule
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.selfplay.ghost import elo_only
from meta.config import Config
from meta.errors import first_line
from meta.runtime.executor import InnerExecutor, make_executor
from meta.runtime.jobs import InnerJob
from meta.trainer.preflight import TrainingPlan

log = logging.getLogger(__name__)
META_LEARNERS = ("reptile", FOMAML)
"""Algorithms whose inner trainings each start from theta (and may run side by side)."""


class BuildsExhausted(RuntimeError):
    """Builds crashed more often than env.max_restarts allows (one line)."""


class InnerTrainings:
    """Draws each meta-step's tasks and trains them from theta; counts restarts of builds."""

    def __init__(self, plan: TrainingPlan, timers: Timers) -> None:
        self.plan, self.cfg, self.timers = plan, plan.cfg, timers
        self.restarts = 0
        self._executor: InnerExecutor | None = None

    def start_executor(self) -> InnerExecutor:
        """Where the jobs run, started on the first call (Ray's actors with the first meta-step)."""
        if self._executor is None:
            self._executor = make_executor(self.cfg, self.plan.pool, self.timers)
            if self.cfg.runtime.backend == "ray":
                self.plan.pool.close()  # the actors own the environments; drop the driver's builds
                if self.carries_optimizer:
                    log.info("the inner trainings chain Adam's state: one after the other")
        return self._executor

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
        self_play_state: SelfPlayState | None = None,
    ) -> list[InnerResult]:
        """The meta-step's trainings; a crashed build or lost actor is replaced, its job retried.

        With `carries_optimizer`, the trainings continue Adam from `optimizer_state`, one
        after the other (each from the state the previous one left); otherwise each starts
        a fresh Adam, and the executor may run them side by side. Games start from the run's
        ELO in `self_play_state`; joint and single also continue its ghost.
        """
        continuous = self.cfg.meta.algorithm not in META_LEARNERS
        play = self_play_state if continuous else elo_only(self_play_state)
        jobs = [job.carrying(self_play_state=play) for job in self.jobs(k, tasks, hyper)]
        on_crash = partial(self._crashed, k)
        if not self.carries_optimizer:
            return self.start_executor().run(theta, jobs, on_crash)
        results, state = [], optimizer_state
        for job in jobs:
            job = job.carrying(optimizer_state=state, self_play_state=play)
            (result,) = self.start_executor().run(theta, [job], on_crash)
            results.append(result)
            state = result.optimizer_state
            play = result.self_play_state if continuous else play
        return results

    def _crashed(self, k: int, crash: BaseException) -> None:
        """Count a crash; BuildsExhausted once env.max_restarts is spent."""
        self.restarts += 1
        if self.restarts > self.cfg.env.max_restarts:
            raise BuildsExhausted(
                f"builds crashed {self.restarts} times (env.max_restarts="
                f"{self.cfg.env.max_restarts}); last: {crash}"
            ) from crash
        what = (
            "A Ray actor was lost"
            if type(crash).__module__.startswith("ray")
            else "A build crashed"
        )
        log.warning(
            "%s in meta-step %d (%s); restarting it and retrying its inner training from theta",
            what,
            k,
            first_line(crash),
        )

    @property
    def carries_optimizer(self) -> bool:
        """Whether Adam's state carries over between trainings (always for joint and single)."""
        meta = self.cfg.meta
        return meta.algorithm not in META_LEARNERS or meta.inner_optimizer == "carry"

    def jobs(self, k: int, tasks: list[reptile.Task], hyper: Hyper) -> list[InnerJob]:
        """The meta-step's inner trainings as jobs, each with its own seed."""
        cfg = self.cfg

        def job(
            index: int, group: tuple[reptile.Task, ...], ppo: PPOConfig, **more: Any
        ) -> InnerJob:
            return InnerJob(
                index=index,
                tasks=group,
                seed=reptile.inner_seed(cfg.seed, k, index),
                ppo=ppo,
                network=cfg.network,
                hyper=hyper,
                device=cfg.torch_device,
                returns_optimizer=self.carries_optimizer,
                meta_gradient=cfg.meta.algorithm == FOMAML,
                **more,
            )

        if cfg.meta.algorithm in META_LEARNERS:
            return [job(i, (t,), cfg.ppo) for i, t in enumerate(tasks)]
        # joint and single continue theta and Adam for reptile's env-step budget: each
        # chunk picks up the run's linear schedules where the last one stopped, so the
        # whole run is one linearly-annealed PPO training, as ML-Agents would run it.
        chunk = replace(cfg.ppo, max_steps=cfg.ppo.max_steps * cfg.meta.meta_batch_size)
        return [job(0, tuple(tasks), chunk, schedule=_run_schedule(cfg, k, chunk.max_steps))]

    def close(self) -> None:
        """Release the executor's workers (the run closes its own pool)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None


def _run_schedule(cfg: Config, k: int, chunk_steps: int) -> RunSchedule:
    """joint and single: chunk k of one run of meta.steps chunks, annealed over all of it."""
    meta, start = cfg.meta, Hyper.of(cfg.ppo)
    if not meta.anneal:
        return RunSchedule(start, start, 0, 1)  # the floors are the values: constant
    floors = Hyper(meta.learning_rate_floor, meta.beta_floor, meta.epsilon_floor)
    return RunSchedule(start, floors, k * chunk_steps, meta.steps * chunk_steps)
