"""Jobs on Ray actors that own their environments: meta-train's trainings, meta-eval's adaptations.

Each actor keeps an environment pool for the life of the run, so builds (env.backend=unity)
stay alive across meta-steps; its builds take a block of worker ids (ports) no other actor or
the driver uses, and a replacement actor takes a fresh block, since a killed actor's builds
may outlive it for a while. A start shared by several trainings (θ) goes to the object store
once; jobs go to whichever actor is free, and results come back in the jobs' order, so the
outer update and meta-eval's tables see exactly what the local executor gives them. Actors
start with the first jobs, so a driver may use the cluster before (meta-eval's baselines).
The jobs that stack (meta.runtime.jobs) are cut into one share per actor, and each share of
two or more goes to an actor as one job that trains it as one stack.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import numpy as np
import ray
import torch
from ray.exceptions import ActorUnavailableError, ObjectLostError, RayActorError, RayTaskError

from meta.algorithm.ppo.rollout import NullTimers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.request import TrainResult
from meta.config import EnvConfig, RuntimeConfig
from meta.process.compute import set_matmul_precision
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import Job, OnCrash, Stacked, Training, Unit, give_up, units

R = TypeVar("R")

log = logging.getLogger(__name__)
CLOSE_TIMEOUT_S = 10.0
"""How long closing waits for actors to close their builds before ending them."""
Arrays = dict[str, np.ndarray]
"""A state_dict as numpy arrays: Ray moves these without copies, torch tensors cost ~40 µs each."""
LOST = (RayActorError, ActorUnavailableError, ObjectLostError)
"""What ray.get raises when an actor's process, or its node, is gone."""
Shipped = list[tuple[Any, Arrays | None]]
"""A job's results as an actor returns them: each with a training's weights as arrays."""


class Worker:
    """A Ray actor: runs jobs on environments it keeps between meta-steps."""

    def __init__(
        self, env: EnvConfig, slot: int, threads: int, precision: str, log_folder: str | None
    ) -> None:
        torch.set_num_threads(threads)
        set_matmul_precision(precision)
        self.pool = EnvPool(env, slot)
        self.pool.log_folder = log_folder

    def run(self, start: Arrays | None, job: Job[Any]) -> Shipped:
        """One job (a training from `start`, which Ray resolves from the object store, or a
        Stacked share); its results, a training's φ as arrays."""
        if isinstance(job, Training):
            assert start is not None
            job = job.starting_from(to_torch(start))
        result = job(self.pool, NullTimers())
        if isinstance(job, Stacked):
            return [shipped(r) for r in cast(list[Any], result)]
        return [shipped(result)]

    def pid(self) -> int:
        """This actor's process id (for the fault tests and the benchmark)."""
        return os.getpid()

    def restart(self) -> None:
        """Drop every build; each is relaunched when next asked for."""
        self.pool.restart_all()

    def close(self) -> None:
        """Close every build."""
        self.pool.close()


RemoteWorker: Any = ray.remote(max_restarts=0)(Worker)


def shipped(result: Any) -> tuple[Any, Arrays | None]:
    """A training's result without its weights, and the weights as arrays; other results as is."""
    if isinstance(result, TrainResult):
        return replace(result, weights={}), to_numpy(result.weights)
    return result, None


def received(result: Any, weights: Arrays | None) -> Any:
    """The result as the job gave it (the inverse of `shipped`)."""
    return result if weights is None else replace(result, weights=to_torch(weights))


def to_numpy(weights: Weights) -> Arrays:
    """A CPU state_dict's tensors as numpy arrays (the same bits)."""
    return {key: value.detach().cpu().numpy() for key, value in weights.items()}


def to_torch(arrays: Arrays) -> Weights:
    """Tensors of their own from arrays (Ray's are read-only views of the object store)."""
    return {key: torch.from_numpy(np.array(value)) for key, value in arrays.items()}


class RayExecutor:
    """Jobs on `runtime.num_actors` actors; a lost actor is replaced, its job retried."""

    def __init__(self, cfg: RuntimeConfig, env: EnvConfig, log_folder: str | None) -> None:
        """The actors, started on first use (and any replacement), run at this process's float32
        matmul precision of now (`torch_matmul_precision`), as spawned workers do."""
        self.cfg, self.env, self.log_folder = cfg, env, log_folder
        self.precision = torch.get_float32_matmul_precision()
        self._next_slot = 1  # slot 0 is the driver's pool
        self._theta: Weights | None = None
        self._theta_ref: Any = None
        self.actors: list[Any] = []

    def _started(self) -> list[Any]:
        """The actors, started on the first call."""
        if not self.actors:
            self.actors = [self._spawn() for _ in range(self.cfg.num_actors)]
        return self.actors

    def _spawn(self) -> Any:
        slot, self._next_slot = self._next_slot, self._next_slot + 1
        options = RemoteWorker.options(num_cpus=self.cfg.cpus_per_actor)
        threads, precision = self.cfg.torch_threads, self.precision
        return options.remote(self.env, slot, threads, precision, self.log_folder)

    def pids(self) -> list[int]:
        """The actors' process ids, in actor order."""
        return list(ray.get([actor.pid.remote() for actor in self._started()]))

    def run(self, jobs: Sequence[Job[R]], on_crash: OnCrash = give_up) -> Iterator[R]:
        """Every result, in order; jobs (or stacked shares) go to free actors, a shared start
        is put once."""
        crash_types = EnvPool(self.env).crash_types()
        queue = deque(self._units(jobs))
        idle = deque(range(len(self._started())))
        running: dict[Any, tuple[int, Unit]] = {}
        results: dict[int, R] = {}
        given = 0
        try:
            while queue or running:
                while queue and idle:
                    actor, unit = idle.popleft(), queue.popleft()
                    running[self._submit(self.actors[actor], unit[1])] = (actor, unit)
                (done,), _ = ray.wait(list(running), num_returns=1)
                actor, unit = running.pop(done)
                try:
                    got = [received(*pair) for pair in ray.get(done)]
                    results.update(zip(unit[0], got, strict=True))
                except LOST as lost:
                    on_crash(lost)
                    self._replace(actor)
                    queue.appendleft(unit)
                except crash_types as crash:
                    on_crash(getattr(crash, "cause", None) or crash)  # the build's own error
                    self._restart(actor)
                    queue.appendleft(unit)
                except RayTaskError as error:
                    raise (error.cause or error) from None  # the job's error, as in-process
                idle.append(actor)
                while given in results:
                    yield results.pop(given)
                    given += 1
        finally:
            for ref in running:
                ray.cancel(ref)

    def _units(self, jobs: Sequence[Job[Any]]) -> list[Unit]:
        """Each job alone, but each actor's share of a stack as one Stacked job."""
        builds = self.env.backend != "native"
        return units(jobs, self.cfg.num_actors, self.cfg.compile, builds)

    def _submit(self, actor: Any, job: Job[Any]) -> Any:
        """The job on `actor`; a training's start goes by reference (put once per start)."""
        if isinstance(job, Training):
            assert job.request.weights is not None, "a training job starts from weights"
            start = self._put(job.request.weights)
            return actor.run.remote(start, job.starting_from({}))
        return actor.run.remote(None, job)

    def _put(self, theta: Weights) -> Any:
        """A start's object store reference, put once per start (the requests of θ share it)."""
        if theta is not self._theta:
            self._theta, self._theta_ref = theta, ray.put(to_numpy(theta))
        return self._theta_ref

    def _restart(self, index: int) -> None:
        """Relaunch an actor's builds (replace the actor if it is gone too)."""
        try:
            ray.get(self.actors[index].restart.remote())
        except LOST:
            self._replace(index)

    def _replace(self, index: int) -> None:
        """A new actor (and a new block of ports) in place of a lost one."""
        ray.kill(self.actors[index], no_restart=True)
        self.actors[index] = self._spawn()
        log.warning("replaced Ray actor %d (a fresh process; its job retried from theta)", index)

    def close(self) -> None:
        """Close the actors' builds, then end the actors."""
        closing = [actor.close.remote() for actor in self.actors]
        try:
            ray.get(closing, timeout=CLOSE_TIMEOUT_S)
        except Exception as error:  # a lost actor has nothing left to close
            log.debug("closing Ray actors: %s", error)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
