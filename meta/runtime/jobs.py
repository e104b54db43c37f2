"""How any process runs a training request: an environment from its pool, then the training.

Running a request needs only an environment pool, so the same request gives the same weights
in this process or in a Ray actor.
"""

from __future__ import annotations

from envs.interface import TaskEnvironment
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.reptile import Task
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.training import train
from meta.runtime.envpool import EnvPool


def run_request(request: TrainRequest, pool: EnvPool, timers: Timers) -> TrainResult:
    """Train the request in an environment of `pool`; release the environment after."""
    env = _env(pool, list(request.tasks), request.seed)
    try:
        with timers.scope("inner_training"):
            return train(request, env, timers)
    finally:
        pool.release(env)


def _env(pool: EnvPool, tasks: list[Task], seed: int) -> TaskEnvironment:
    """One task's environment, or all tasks' areas side by side for joint training."""
    if len(tasks) > 1:
        return pool.concat([(t.family, t.params) for t in tasks], seed)
    return pool.env(tasks[0].family, tasks[0].params, seed)
