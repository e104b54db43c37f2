"""Builds that die, and seeds that once overflowed UnityEnvironment's 32-bit field."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from faultkit import run, start
from processes import halted, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]
UNITY = ["experiment=tiny", "logger=quiet", "env=unity", "env.num_areas=4"]


def _players(pid: int) -> list[int]:
    """Build processes (the player stand-in) below `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "envs.unity.player" in cmdline and f"{pid}" in _ancestors(int(entry.name)):
            found.append(int(entry.name))
    return found


def _ancestors(pid: int) -> str:
    """The pids above `pid`, as one string to search."""
    chain = []
    while pid > 1:
        try:
            stat = (Path("/proc") / str(pid) / "stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        chain.append(str(pid))
    return " ".join(chain)


@pytest.mark.parametrize("seed", [2, 7])
def test_seeds_that_used_to_overflow_train_on_builds(
    seed: int, tmp_path: Path, free_ports: Callable[..., int]
) -> None:
    port = f"env.base_port={free_ports(2)}"
    code, err = run(tmp_path, *UNITY, port, f"seed={seed}", "meta.steps=3", "run_id=s")
    assert code == 0, err


def test_a_killed_build_is_relaunched_and_the_run_completes(
    tmp_path: Path, free_ports: Callable[..., int]
) -> None:
    port = f"env.base_port={free_ports(2)}"
    # held at meta-step 1's start while its builds are killed: they are found dead there
    proc = start(
        tmp_path,
        *UNITY,
        port,
        "seed=2",
        "meta.steps=30",
        "run_id=b",
        fault="inner_training@1:SIGSTOP",
    )
    wait_until(lambda: halted(proc), proc)
    killed = _players(proc.pid)
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert killed and "A build crashed" in out, out
    rows = (tmp_path / "results" / "b" / "meta_steps.csv").read_text().splitlines()
    assert len(rows) == 31
