"""The worker side of the unity backend: one process holding one ``UnityEnvironment``.

The parent sends ``(command, payload)`` down a pipe: ``params`` (queued on the
EnvironmentParametersChannel, sent with the next step or reset), ``step`` (actions per
behavior), ``reset`` and ``close``; every step and reset is answered with the steps of each
behavior and the stats received since. Failures come back as a kind and a message that the
parent turns into one of the exceptions below.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlagents_envs.exception import (
    UnityCommunicationException,
    UnityCommunicatorStoppedException,
    UnityEnvironmentException,
    UnityTimeOutException,
    UnityWorkerInUseException,
)

from envs.backend.host import use_this_interpreter

if TYPE_CHECKING:
    from mlagents_envs.environment import UnityEnvironment
    from mlagents_envs.side_channel.environment_parameters_channel import (
        EnvironmentParametersChannel,
    )
    from mlagents_envs.side_channel.side_channel import SideChannel
    from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel


class BuildError(RuntimeError):
    """A build could not be started or run."""


class BuildCrashed(BuildError):
    """A build, or its worker, died or stopped answering: close it and launch it anew."""


class BuildTimeout(BuildError):
    """A build did not connect within ``timeout_wait``."""


class PortInUse(BuildError):
    """The port of a worker is taken."""


START_MARGIN = 30.0  # seconds a worker may take beyond timeout_wait (spawn, imports)


@dataclass(frozen=True)
class WorkerSettings:
    """What one worker needs to launch its build."""

    path: str
    worker_id: int
    base_port: int
    seed: int
    num_areas: int
    timeout_wait: float
    no_graphics: bool
    log_folder: str

    @property
    def port(self) -> int:
        """The gRPC port of this worker."""
        return self.base_port + self.worker_id

    @property
    def log_file(self) -> Path:
        """The player log that UnityEnvironment asks the build to write."""
        return Path(self.log_folder) / f"Player-{self.worker_id}.log"


def _steps(env: Any) -> dict:
    return {name: env.get_steps(name) for name in env.behavior_specs}


def run(conn: Connection, settings: WorkerSettings, params: dict[str, float]) -> None:
    """Worker process: launch the build, then serve the parent's commands until told to close."""
    from mlagents_envs.side_channel.environment_parameters_channel import (
        EnvironmentParametersChannel,
    )
    from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

    use_this_interpreter()
    os.makedirs(settings.log_folder, exist_ok=True)
    parameters, stats, env = EnvironmentParametersChannel(), StatsSideChannel(), None
    try:
        for key, value in params.items():
            parameters.set_float_parameter(key, value)
        env = _launch(settings, [parameters, stats])
        env.reset()
        build_pid = env._process.pid if env._process is not None else 0
        ready = (dict(env.behavior_specs), _steps(env), dict(stats.get_and_reset_stats()))
        conn.send(("ready", (*ready, build_pid)))
        _serve(conn, env, parameters, stats)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the parent is gone or interrupted: just clean up
    except UnityWorkerInUseException as error:
        _report(conn, "port", str(error))
    except UnityTimeOutException as error:
        message = str(error).splitlines()[0]
        _report(conn, "timeout" if env is None else "crashed", message)
    except (
        UnityEnvironmentException,
        UnityCommunicatorStoppedException,
        UnityCommunicationException,
    ) as error:
        _report(conn, "crashed" if env is not None else "exited", str(error))
    except Exception:
        _report(conn, "error", traceback.format_exc())
    finally:
        if env is not None:
            with contextlib.suppress(Exception):  # closing after a failure must not mask it
                env.close()
        conn.close()


def _launch(settings: WorkerSettings, side_channels: list[SideChannel]) -> UnityEnvironment:
    """Start the build through UnityEnvironment, which waits for its first contact."""
    from mlagents_envs.environment import UnityEnvironment

    return UnityEnvironment(
        file_name=settings.path,
        worker_id=settings.worker_id,
        base_port=settings.base_port,
        seed=settings.seed,
        no_graphics=settings.no_graphics,
        timeout_wait=int(settings.timeout_wait),
        side_channels=side_channels,
        log_folder=settings.log_folder,
        num_areas=settings.num_areas,
    )


def _serve(
    conn: Connection,
    env: UnityEnvironment,
    parameters: EnvironmentParametersChannel,
    stats: StatsSideChannel,
) -> None:
    """Answer step, reset and params commands until the parent says close."""
    while True:
        command, payload = conn.recv()
        if command == "close":
            return
        if command == "params":
            for key, value in payload.items():
                parameters.set_float_parameter(key, value)
            continue
        if command == "step":
            for name, action in payload.items():
                env.set_actions(name, action)
            env.step()
        else:
            env.reset()
        conn.send(("ok", (_steps(env), dict(stats.get_and_reset_stats()))))


def _report(conn: Connection, kind: str, message: str) -> None:
    with contextlib.suppress(OSError):
        conn.send((kind, message))


class Worker:
    """The parent's handle on one worker process."""

    def __init__(
        self, context: SpawnContext, settings: WorkerSettings, params: dict[str, float]
    ) -> None:
        self.settings = settings
        self.build_pid = 0
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=run,
            args=(child, settings, params),
            daemon=True,
            name=f"unity-worker-{settings.worker_id}",
        )
        self.process.start()
        child.close()

    def ready(self) -> tuple[dict, dict, dict]:
        """Wait for the build to connect and reset: its specs, steps and stats."""
        specs, steps, stats, self.build_pid = self._receive(
            self.settings.timeout_wait + START_MARGIN
        )
        return specs, steps, stats

    def send(self, command: str, payload: object) -> None:
        """Send a command (BuildCrashed if the worker is gone)."""
        try:
            self.conn.send((command, payload))
        except OSError:
            raise self._error("crashed", "its worker process died") from None

    def result(self) -> tuple[dict, dict]:
        """The answer to the last step or reset."""
        return self._receive(None)

    def stop_soon(self) -> None:
        """Ask the worker to close its build (no wait)."""
        with contextlib.suppress(OSError):
            self.conn.send(("close", None))

    def join(self) -> None:
        """Wait for the worker to exit; terminate it if it does not."""
        self.process.join(self.settings.timeout_wait + 5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()

    def _receive(self, timeout: float | None) -> Any:
        try:
            if timeout is not None and not self.conn.poll(timeout):
                raise self._error("timeout", f"no answer within {timeout:.0f}s")
            kind, payload = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(1)
            raise self._error(
                "crashed", f"its worker process died (exit code {self.process.exitcode})"
            ) from None
        if kind in ("ok", "ready"):
            return payload
        raise self._error(kind, payload)

    def _error(self, kind: str, detail: str) -> BuildError:
        s = self.settings
        where = f"{s.path} (worker_id {s.worker_id}, port {s.port})"
        log = f"see its log {s.log_file}"
        if kind == "port":
            return PortInUse(
                f"port {s.port} (base_port {s.base_port} + worker_id "
                f"{s.worker_id}) is in use: choose another env.base_port or worker_id"
            )
        if kind == "timeout":
            return BuildTimeout(f"{where} did not connect within {s.timeout_wait:g}s; {log}")
        if kind == "exited":
            return BuildCrashed(f"{where} exited before connecting ({detail}); {log}")
        if kind == "crashed":
            return BuildCrashed(f"{where} crashed: {detail}; {log}")
        return BuildError(f"{where} failed:\n{detail}")
