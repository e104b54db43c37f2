"""The builds through the real ``UnityEnvironment``, and the unity backend over them."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple, BaseEnv
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.exception import UnityEnvironmentException
from mlagents_envs.side_channel.environment_parameters_channel import (
    EnvironmentParametersChannel,
)
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

import envs
from envs.backend.unity_env import (
    BuildCrashed,
    BuildTimeout,
    PortInUse,
    UnityEnv,
    resolve_build,
)
from envs.tasks.concat import ConcatEnv
from envs.unity import side_channels

FAMILIES = ("FindTarget", "CarryObject")
FreePorts = Callable[..., int]
# mlagents_envs 0.28 compares versions with distutils' StrictVersion.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*")
SPAWNS_BUILDS = pytest.mark.integration  # launches builds (and worker processes)
BUILD_TIMEOUT = pytest.mark.timeout(60)  # a few seconds when well; a mute build would hang


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` exits (or is a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs now (neither gone nor a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def launch(
    family: str, tmp_path: Path, port: int, channels: list | None = None, **kwargs: object
) -> UnityEnvironment:
    """A build of ``family`` launched by UnityEnvironment on ``port``, as mlagents-learn does."""
    options = {"num_areas": 6, "seed": 11, "timeout_wait": 20, **kwargs}
    return UnityEnvironment(
        file_name=str(resolve_build(family)),
        base_port=port,
        no_graphics=True,
        log_folder=str(tmp_path),
        side_channels=channels or [StatsSideChannel()],
        **options,
    )


def assert_same_steps(a: BaseEnv, b: BaseEnv) -> None:
    """Bitwise-equal decision and terminal steps of behavior Brain."""
    for got, want in zip(a.get_steps("Brain"), b.get_steps("Brain"), strict=True):
        assert np.array_equal(got.agent_id, want.agent_id)
        assert np.array_equal(got.obs[0], want.obs[0])
        assert np.array_equal(got.reward, want.reward)
    assert np.array_equal(a.get_steps("Brain")[1].interrupted, b.get_steps("Brain")[1].interrupted)


def drive(a: BaseEnv, b: BaseEnv, steps: int, seed: int = 0) -> None:
    """Step both with the same random actions, checking their steps stay identical."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        assert_same_steps(a, b)
        n = len(a.get_steps("Brain")[0])
        move = ActionTuple(continuous=rng.uniform(-1, 1, (n, 2)).astype(np.float32))
        a.set_actions("Brain", move)
        b.set_actions("Brain", move)
        a.step()
        b.step()
    assert_same_steps(a, b)


@SPAWNS_BUILDS
@BUILD_TIMEOUT
@pytest.mark.parametrize("family", FAMILIES)
def test_build_matches_the_native_task_bit_for_bit(
    family: str, tmp_path: Path, free_ports: FreePorts
) -> None:
    params, stats = EnvironmentParametersChannel(), StatsSideChannel()
    params.set_float_parameter("max_step", 25.0)
    env = launch(family, tmp_path, free_ports(), [params, stats])
    native = envs.make(family, num_areas=6, seed=11, max_step=25)
    try:
        env.reset()
        assert env.behavior_specs["Brain"] == native.behavior_specs["Brain"]
        drive(env, native, 120)
        params.set_float_parameter("agent_speed", 0.3)  # from each area's next episode
        native.set_parameters(agent_speed=0.3)
        drive(env, native, 60, seed=1)
        env.reset()
        native.reset()
        drive(env, native, 10, seed=2)
        got, want = stats.get_and_reset_stats(), native.stats_channel.get_and_reset_stats()
        assert set(got) == {"Environment/Success", "Environment/Episode Length"}
        assert got == want
    finally:
        env.close()
    log = (tmp_path / "Player-0.log").read_text()
    assert "environment parameter max_step=25.0" in log and "quitting after" in log


@SPAWNS_BUILDS
@BUILD_TIMEOUT
def test_parameters_change_the_episodes_and_samplers_draw_per_episode(
    tmp_path: Path, free_ports: FreePorts
) -> None:
    params = EnvironmentParametersChannel()
    params.set_uniform_sampler_parameters("agent_speed", 0.1, 0.3, seed=7)
    env = launch("FindTarget", tmp_path, free_ports(), [params, StatsSideChannel()], num_areas=4)
    bounds = [float(np.float32(0.1)), float(np.float32(0.3))]  # as the message carries them
    draw = side_channels.Sampler(0, bounds, seed=7)  # the build's sampler, replayed here
    native = envs.make("FindTarget", num_areas=4, seed=11, agent_speed=draw())
    default = envs.make("FindTarget", num_areas=4, seed=11)
    try:
        env.reset()
        rng = np.random.default_rng(3)
        for _ in range(150):
            assert_same_steps(env, native)
            move = ActionTuple(continuous=rng.uniform(-1, 1, (4, 2)).astype(np.float32))
            for target in (env, native, default):
                target.set_actions("Brain", move)
            native.set_parameters(agent_speed=draw())
            for target in (env, native, default):
                target.step()
        assert not np.array_equal(
            env.get_steps("Brain")[0].obs[0], default.get_steps("Brain")[0].obs[0]
        )
    finally:
        env.close()


@SPAWNS_BUILDS
@BUILD_TIMEOUT
def test_build_honours_areas_and_accepts_any_player_argument(
    tmp_path: Path, free_ports: FreePorts
) -> None:
    log = tmp_path / "custom" / "player.log"
    env = launch(
        "CarryObject",
        tmp_path,
        free_ports(),
        num_areas=7,
        additional_args=["-logFile", str(log), "-screen-fullscreen", "0", "--some-flag"],
    )
    try:
        env.reset()
        assert len(env.get_steps("Brain")[0]) == 7
    finally:
        env.close()
    text = log.read_text()
    assert "7 areas" in text and "'-screen-fullscreen', '0', '--some-flag'" in text
    env = launch(
        "CarryObject", tmp_path, free_ports(), additional_args=["--mlagents-num-areas", "3"]
    )
    try:
        env.reset()
        assert len(env.get_steps("Brain")[0]) == 3
    finally:
        env.close()


ORPHAN_SCRIPT = """
import sys
from envs.backend.unity_env import UnityEnv
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.exception import UnityEnvironmentException
if __name__ == "__main__":
    kind, port, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind == "raw":
        env = UnityEnvironment(file_name="envs/builds/FindTarget", base_port=port,
                               no_graphics=True, log_folder=folder)
        env.reset()
        print(env._process.pid, flush=True)
    else:
        env = UnityEnv("FindTarget", base_port=port, num_envs=2, log_folder=folder)
        print(" ".join(str(p) for pair in env.pids for p in pair), flush=True)
    sys.stdin.read()  # alive until killed
"""


@SPAWNS_BUILDS
@BUILD_TIMEOUT
@pytest.mark.parametrize("kind", ["raw", "backend"])
def test_no_orphan_when_the_python_side_dies(
    kind: str, tmp_path: Path, free_ports: FreePorts
) -> None:
    root = Path(envs.__file__).resolve().parent.parent
    trainer = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, kind, str(free_ports(2)), str(tmp_path)],
        cwd=root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids = [int(p) for p in trainer.stdout.readline().split()]  # type: ignore[union-attr]
        assert pids and all(alive(pid) for pid in pids)
    finally:
        trainer.kill()
        trainer.wait()
    assert all(gone(pid) for pid in pids)


@SPAWNS_BUILDS
@BUILD_TIMEOUT
def test_no_orphan_after_close_and_logs_written(tmp_path: Path, free_ports: FreePorts) -> None:
    env = launch("FindTarget", tmp_path, free_ports())
    env.reset()
    pid = env._process.pid  # type: ignore[union-attr]
    env.close()
    assert gone(pid)  # close() waits for the build, or kills it and does not reap it
    log = (tmp_path / "Player-0.log").read_text()
    # mlagents_envs' close() queues a status-400 reply and then stops its gRPC server without
    # grace, so the build sees either that reply or the server gone: both end the session
    assert "trainer closed (status 400)" in log or "connection lost: gRPC UNAVAILABLE" in log, log
    assert log.rstrip().splitlines()[-1].split("] ", 1)[1].startswith("time per step:")


@SPAWNS_BUILDS
@BUILD_TIMEOUT
def test_backend_matches_native_across_meta_steps(tmp_path: Path, free_ports: FreePorts) -> None:
    with UnityEnv(
        "CarryObject",
        num_envs=2,
        num_areas=3,
        seed=5,
        base_port=free_ports(2),
        timeout_wait=20,
        log_folder=tmp_path,
        max_step=30,
    ) as env:
        natives = [envs.make("CarryObject", num_areas=3, seed=5 + i, max_step=30) for i in range(2)]
        both = ConcatEnv(natives, id_stride=2**30)
        for meta_step, speed in enumerate((0.2, 0.3)):
            env.set_parameters(agent_speed=speed)
            both.set_parameters(agent_speed=speed)
            env.reset()
            both.reset()
            drive(env, both, 40, seed=meta_step)
        assert list(env.get_steps("Brain")[0].agent_id) == [0, 1, 2, 2**30, 2**30 + 1, 2**30 + 2]
        stats = env.stats_channel.get_and_reset_stats()
        assert len(stats["Environment/Success"]) > 0
        with pytest.raises(ValueError, match="agent_speed"):
            env.set_parameters(agent_speed=-1.0)


@SPAWNS_BUILDS
@BUILD_TIMEOUT
def test_a_killed_build_or_worker_is_detected(tmp_path: Path, free_ports: FreePorts) -> None:
    pids: list[int] = []
    for victim in (1, 0):  # the build, then (in a fresh env) the worker that drives it
        env = UnityEnv(
            "FindTarget", num_areas=2, base_port=free_ports(), timeout_wait=10, log_folder=tmp_path
        )
        try:
            env.step()
            os.kill(env.pids[0][victim], signal.SIGKILL)
            expected = "SIGKILL.*Player-0.log" if victim else "worker process died"
            with pytest.raises(BuildCrashed, match=expected):
                env.step()
            pids += [pid for pair in env.pids for pid in pair]
        finally:
            env.close()
        with pytest.raises(UnityEnvironmentException, match="No Unity environment is loaded"):
            env.step()
    assert all(gone(pid) for pid in pids)


def test_a_missing_build_fails_before_launching_anything(tmp_path: Path) -> None:
    missing = tmp_path / "Nowhere"
    with pytest.raises(FileNotFoundError, match=f"Unity build not found: {missing}"):
        UnityEnv("FindTarget", path=missing, log_folder=tmp_path)
    assert not multiprocessing.active_children()
    with pytest.raises(ValueError, match="no default build"):
        resolve_build("Elsewhere")


def fake_build(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "Fake.x86_64"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return tmp_path / "Fake"


@SPAWNS_BUILDS
@BUILD_TIMEOUT
def test_a_build_that_never_connects_times_out_naming_its_log(
    tmp_path: Path, free_ports: FreePorts
) -> None:
    # the fake ends only after 600 s, with BuildCrashed: a BuildTimeout is its own 2 s expiring
    start = time.monotonic()
    with pytest.raises(
        BuildTimeout,
        match=r"Fake.x86_64 .* did not connect within 2s; "
        r"see its log .*Player-0.log",
    ):
        UnityEnv(
            "Fake",
            path=fake_build(tmp_path, "exec sleep 600"),
            timeout_wait=2,
            base_port=free_ports(),
            log_folder=tmp_path,
        )
    assert time.monotonic() - start >= 2
    with pytest.raises(BuildCrashed, match="exited before connecting"):
        UnityEnv(
            "Fake",
            path=fake_build(tmp_path, "exit 3"),
            timeout_wait=5,
            base_port=free_ports(),
            log_folder=tmp_path,
        )


def test_a_taken_port_is_named_with_the_fix(tmp_path: Path, free_ports: FreePorts) -> None:
    port = free_ports()
    with socket.socket() as taken:
        taken.bind(("localhost", port))
        taken.listen()
        with pytest.raises(PortInUse, match=f"port {port} .* another env.base_port or worker_id"):
            UnityEnv("FindTarget", base_port=port, log_folder=tmp_path)
