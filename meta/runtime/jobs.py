"""One inner training as a picklable description, and the function that runs it anywhere.

A job carries everything but θ (which travels once per meta-step, beside the jobs): its tasks,
seed, PPO settings, annealed hyperparameters and, where Adam carries over, the optimizer state
to continue. Running it needs only an environment pool, so the same job gives the same weights
in this process or in a Ray actor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from envs.interface import TaskEnvironment
from meta.algorithm.fomaml import meta_gradient
from meta.algorithm.inner import InnerResult, OptimizerState, SelfPlayState, inner_train
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper, RunSchedule
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.reptile import Task
from meta.runtime.envpool import EnvPool


@dataclass(frozen=True)
class InnerJob:
    """One inner training from θ: tasks (several: joint's areas side by side) and settings."""

    index: int
    """Position in the meta-step: results are gathered in this order."""
    tasks: tuple[Task, ...]
    seed: int
    ppo: PPOConfig
    network: NetworkConfig
    hyper: Hyper
    device: str = "cpu"
    schedule: RunSchedule | None = None
    """joint and single: the run's linear schedule this chunk follows (None: per training)."""
    optimizer_state: OptimizerState | None = None
    """Adam's state to continue (None: a fresh Adam)."""
    returns_optimizer: bool = False
    """Whether the result keeps Adam's state (only a chain of trainings needs it back)."""
    self_play_state: SelfPlayState | None = None
    """A game's self-play state: the run's ELO and, to continue one, the ghost."""
    meta_gradient: bool = False
    """fomaml: also measure PPO's gradient at the trained weights on one fresh buffer."""

    def carrying(self, **state: Any) -> InnerJob:
        """The same job continuing from the state a previous training left (optimizer_state=...)."""
        return replace(self, **state)


def run_job(job: InnerJob, theta: Weights, pool: EnvPool, timers: Timers) -> InnerResult:
    """Train the job's tasks from theta in an environment of `pool`; release it after."""
    env = _env(pool, list(job.tasks), job.seed)
    try:
        with timers.scope("inner_training"):
            result = inner_train(
                env,
                theta,
                job.network,
                job.ppo,
                seed=job.seed,
                hyper=job.hyper,
                stats_channel=env.stats_channel,
                timers=timers,
                device=job.device,
                optimizer_state=job.optimizer_state,
                self_play_state=job.self_play_state,
                schedule=None if job.schedule is None else job.schedule.at,
            )
        if job.meta_gradient:
            with timers.scope("meta_gradient"):
                result = _with_meta_gradient(job, env, result)
    finally:
        pool.release(env)
    return result if job.returns_optimizer else replace(result, optimizer_state=None)


def _with_meta_gradient(job: InnerJob, env: TaskEnvironment, result: InnerResult) -> InnerResult:
    """The result with FOMAML's meta-gradient, its buffer counted in the training's steps."""
    gradient, steps = meta_gradient(
        env, result.weights, job.network, job.ppo, job.hyper, job.seed, job.device
    )
    stats = {**result.stats, "steps": result.stats["steps"] + steps}
    return replace(result, meta_gradient=gradient, stats=stats)


def _env(pool: EnvPool, tasks: list[Task], seed: int) -> TaskEnvironment:
    """One task's environment, or all tasks' areas side by side for joint training."""
    if len(tasks) > 1:
        return pool.concat([(t.family, t.params) for t in tasks], seed)
    return pool.env(tasks[0].family, tasks[0].params, seed)
