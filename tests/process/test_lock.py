"""meta/process/lock.py: one live holder per run, named to another process; dead ones replaced."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from meta.process.lock import RunLock, RunLocked, lock_path

HOLD = textwrap.dedent(
    """
    import sys
    from meta.process.lock import RunLock
    lock = RunLock(sys.argv[1], "run")
    lock.acquire()
    print("held", flush=True)
    sys.stdin.read()  # held until killed
    """
)


def _holder(results: Path) -> subprocess.Popen[str]:
    """A process that takes the lock of run 'run' and holds it until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(results)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_second_process_is_refused_naming_the_holder(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        with pytest.raises(RunLocked) as info:
            RunLock(tmp_path, "run").acquire()
        message = str(info.value)
        assert f"pid {holder.pid}" in message and "\n" not in message
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_killed_holder_is_taken_over_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    holder = _holder(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    lock = RunLock(tmp_path, "run")
    with caplog.at_level(logging.WARNING), lock:
        assert lock.held
    assert f"pid {holder.pid}" in caplog.text and "no longer running" in caplog.text


def test_release_removes_the_file_so_the_next_holder_does_not_warn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with RunLock(tmp_path, "run"):
        assert str(os.getpid()) in lock_path(tmp_path, "run").read_text()
    assert not lock_path(tmp_path, "run").exists()
    with caplog.at_level(logging.WARNING), RunLock(tmp_path, "run"):
        pass
    assert caplog.text == "" and list(tmp_path.iterdir()) == []


def test_the_lock_lives_beside_the_run_directory(tmp_path: Path) -> None:
    assert lock_path(tmp_path, "a") == tmp_path / ".a.lock"
    with RunLock(tmp_path, "a"), pytest.raises(RunLocked):
        RunLock(tmp_path, "a").acquire()  # a second descriptor in the same process is refused too


def test_a_refusal_waits_for_the_holder_to_write_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl
    import json
    import socket
    import time

    path = lock_path(tmp_path, "r")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held, its record not written yet: the holder's first instant
    record = {"pid": os.getpid(), "host": socket.gethostname(), "since": 0.0}
    waits: list[float] = []
    pause = time.sleep

    def sleep(seconds: float) -> None:  # the holder writes while the refused process waits
        if not waits:
            os.pwrite(fd, json.dumps(record).encode(), 0)
        waits.append(seconds)
        pause(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    try:
        with pytest.raises(RunLocked, match=f"in use by pid {os.getpid()} on host"):
            RunLock(tmp_path, "r").acquire()
    finally:
        os.close(fd)
    assert len(waits) == 1  # it found no record, waited once, and read the holder's
