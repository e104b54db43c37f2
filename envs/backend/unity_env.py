"""The unity backend: a task family run by ML-Agents builds, presented as one BaseEnv.

As ML-Agents' ``SubprocessEnvManager`` does, every build gets its own worker process holding
a ``UnityEnvironment`` (worker ``i`` uses ``worker_id + i``, so port ``base_port + worker_id
+ i``, and seed ``seed + i`` folded below 2^31). Commands go down pipes to all workers before
any answer is read, so the builds step in parallel; their agents are presented as one
``BaseEnv`` with ids offset per worker. Parameters travel through
``EnvironmentParametersChannel`` and stats come back through ``StatsSideChannel``, so
trainers use this exactly like ``envs.make``.

Memory: each worker costs two processes, the worker (Python, mlagents_envs, grpcio: about
67 MB RSS) and the build (about 53 MB for the built-in tasks at 64 areas);
``python -m envs.bench_unity`` measures them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from mlagents_envs.base_env import (
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.exception import UnityEnvironmentException
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

import envs
from envs import DEFAULT_BUILDS
from envs.backend import worker as unity_worker
from envs.backend.worker import BuildCrashed, BuildError, BuildTimeout, PortInUse, WorkerSettings
from envs.constants import BUILDS_DIR, PROJECT_ROOT
from envs.tasks.concat import concat_decisions, concat_terminals, offset_ids

__all__ = ["BuildCrashed", "BuildError", "BuildTimeout", "PortInUse", "UnityEnv", "make"]

EXTENSIONS = ("", ".x86_64", ".x86")
SEED_LIMIT = 2**31
"""UnityEnvironment sends the seed in a signed 32-bit protobuf field."""


def build_seed(seed: int, index: int) -> int:
    """Worker `index`'s seed: `seed + index` folded below 2^31, as the protocol requires."""
    return (seed + index) % SEED_LIMIT


def resolve_build(name: str, path: str | os.PathLike[str] | None = None) -> str:
    """Absolute path of a build (relative paths: the project, then the working directory)."""
    if path is None:
        if name not in DEFAULT_BUILDS:
            raise ValueError(f"no default build for task {name!r}: give its path")
        path = DEFAULT_BUILDS[name]
    given = Path(path).expanduser()
    bases = [given] if given.is_absolute() else [PROJECT_ROOT / given, Path.cwd() / given]
    for base in bases:
        for extension in EXTENSIONS:
            candidate = base.with_name(base.name + extension) if extension else base
            if candidate.is_file():
                if not os.access(candidate, os.X_OK):
                    raise PermissionError(
                        f"build {candidate} is not executable (chmod +x {candidate})"
                    )
                return str(candidate)
    raise FileNotFoundError(
        f"Unity build not found: {path} (looked for {bases[0]}{{,.x86_64,.x86}})"
    )


def check_port(port: int, worker_id: int, base_port: int) -> None:
    """PortInUse unless ``port`` is free, tested the way mlagents_envs tests it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("localhost", port))
        except OSError:
            raise PortInUse(
                f"port {port} (base_port {base_port} + worker_id {worker_id}) is "
                f"in use: choose another env.base_port or worker_id"
            ) from None


class WorkerStats(StatsSideChannel):
    """The stats every worker's StatsSideChannel received, gathered at each step."""

    def add(self, stats: Mapping[str, list]) -> None:
        """Append one worker's stats."""
        for key, values in stats.items():
            self.stats[key].extend(values)


class UnityEnv(BaseEnv):
    """``num_envs`` builds of one task family stepped in parallel, as one BaseEnv."""

    def __init__(
        self,
        name: str,
        *,
        path: str | os.PathLike[str] | None = None,
        num_envs: int = 1,
        num_areas: int = 1,
        seed: int = 0,
        base_port: int = 5005,
        worker_id: int = 0,
        timeout_wait: float = 60,
        no_graphics: bool = True,
        log_folder: str | os.PathLike[str] | None = None,
        **params: float,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.name, self.path = name, resolve_build(name, path)
        folder = log_folder or Path(tempfile.gettempdir()) / "meta-harness-unity"
        self.log_folder = Path(folder).resolve()
        self.params = self._validated(params)
        self.settings = [
            WorkerSettings(
                path=self.path,
                worker_id=worker_id + i,
                base_port=base_port,
                seed=build_seed(seed, i),
                num_areas=num_areas,
                timeout_wait=timeout_wait,
                no_graphics=no_graphics,
                log_folder=str(self.log_folder),
            )
            for i in range(num_envs)
        ]
        self.stats_channel = WorkerStats()
        self._stride = 2**31 // num_envs  # agent ids of worker i start at i * stride
        self._workers: list[unity_worker.Worker] = []
        self._steps: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}
        self._parts: dict[str, list[tuple[DecisionSteps, TerminalSteps]]] = {}
        self._actions: dict[str, ActionTuple] = {}
        self._start()

    @property
    def behavior_specs(self) -> BehaviorMapping:
        """The builds' behaviors and specs."""
        return BehaviorMapping(self._specs)

    @property
    def pids(self) -> list[tuple[int, int]]:
        """(worker pid, build pid) of every worker."""
        return [(w.process.pid or 0, w.build_pid) for w in self._workers]

    def log_file(self, index: int = 0) -> Path:
        """The player log of worker ``index``."""
        return self.log_folder / f"Player-{self.settings[index].worker_id}.log"

    def set_parameters(self, **params: float) -> None:
        """Send parameters to every build; they apply from each area's next episode."""
        checked = self._validated({**self.params, **params})
        self.params = checked
        for worker in self._workers:
            worker.send("params", {k: checked[k] for k in params})

    def reset(self) -> None:
        """Reset every build."""
        self._actions.clear()
        self._command("reset", [None] * len(self._workers))

    def step(self) -> None:
        """Step every build in parallel with the actions set since the last step."""
        per_worker: list[dict[str, ActionTuple]] = [{} for _ in self._workers]
        for name, action in self._actions.items():
            start = 0
            for i, (decision, _) in enumerate(self._parts[name]):
                end = start + len(decision)
                rows = slice(start, end)
                per_worker[i][name] = ActionTuple(
                    continuous=action.continuous[rows], discrete=action.discrete[rows]
                )
                start = end
        self._actions.clear()
        self._command("step", per_worker)

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        """Decision and terminal steps of every build's agents (ids offset per worker)."""
        return self._steps[behavior_name]

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        """Actions of all agents in the order of the last DecisionSteps."""
        spec = self._specs[behavior_name].action_spec
        n = len(self._steps[behavior_name][0])
        self._actions[behavior_name] = spec._validate_action(action, n, behavior_name)

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        """The action of one agent for the next step."""
        spec = self._specs[behavior_name].action_spec
        decision = self._steps[behavior_name][0]
        action = spec._validate_action(action, 1, behavior_name)
        if behavior_name not in self._actions:
            self._actions[behavior_name] = spec.empty_action(len(decision))
        index = decision.agent_id_to_index[agent_id]
        if spec.continuous_size:
            self._actions[behavior_name].continuous[index] = action.continuous[0]
        if spec.discrete_size:
            self._actions[behavior_name].discrete[index] = action.discrete[0]

    def close(self) -> None:
        """Close every build and worker."""
        self._stop()

    def __enter__(self) -> UnityEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _validated(self, params: Mapping[str, float]) -> dict[str, float]:
        """Parameters as floats, checked as the native backend checks them (our builds only)."""
        # A lab's build reads the parameters it knows and ignores the rest, as Unity does.
        ours = Path(self.path).parent == BUILDS_DIR
        if ours and self.name in envs.FAMILIES and params:
            envs.family(self.name).validate(params)
        return {k: float(v) for k, v in params.items()}

    def _start(self) -> None:
        for settings in self.settings:
            check_port(
                settings.base_port + settings.worker_id, settings.worker_id, settings.base_port
            )
        context = mp.get_context("spawn")
        self._workers = []
        try:
            for settings in self.settings:
                self._workers.append(unity_worker.Worker(context, settings, self.params))
            results = [worker.ready() for worker in self._workers]
        except BaseException:
            self._stop()
            raise
        self._specs = dict(results[0][0])
        self._merge([(steps, stats) for _, steps, stats in results])

    def _stop(self) -> None:
        for worker in self._workers:
            worker.stop_soon()
        for worker in self._workers:
            worker.join()
        self._workers = []

    def _command(self, command: str, payloads: list) -> None:
        if not self._workers:
            raise UnityEnvironmentException("No Unity environment is loaded.")
        try:
            for worker, payload in zip(self._workers, payloads, strict=True):
                worker.send(command, payload)
            self._merge([worker.result() for worker in self._workers])
        except BuildError:
            for worker in self._workers:
                worker.stop_soon()
            raise

    def _merge(self, results: list[tuple[dict, Mapping[str, list]]]) -> None:
        for _, stats in results:
            self.stats_channel.add(stats)
        for name in self._specs:
            parts = [steps[name] for steps, _ in results]
            self._parts[name] = parts
            if len(parts) == 1:
                self._steps[name] = parts[0]
                continue
            offsets = [i * self._stride for i in range(len(parts))]
            decisions, terminals = [d for d, _ in parts], [t for _, t in parts]
            self._steps[name] = (
                concat_decisions(decisions, _ids(decisions, offsets)),
                concat_terminals(terminals, _ids(terminals, offsets)),
            )


def _ids(parts: list, offsets: list[int]) -> np.ndarray:
    """Agent ids made unique across workers: worker i's ids plus i * stride."""
    stride = offsets[1] if len(offsets) > 1 else 2**31
    if any(len(p.agent_id) and (p.agent_id.min() < 0 or p.agent_id.max() >= stride) for p in parts):
        raise BuildError(f"a build sent agent ids outside [0, {stride}): cannot merge workers")
    return offset_ids(parts, offsets)


def make(name: str, **kwargs: Any) -> UnityEnv:
    """A task family run by its build: ``UnityEnv(name, **kwargs)`` (see its arguments)."""
    return UnityEnv(name, **kwargs)
