"""Processes under test, timed by what they report, never by the test's own clock alone.

The instants a test acts at are events of the process: its SIGTERM handler showing in
/proc/<pid>/status (its first instruction has run), a file it writes, a line it prints, or a
fault point where `META_HARNESS_FAULT=<point>@<meta_step>:SIGSTOP` makes it stop itself
(`meta.process.faults` sends the named signal; SIGSTOP holds the process there until SIGCONT).
A delay is drawn as a fraction of the life of the same command measured on this machine, and
the stop at a fault point bounds it: the signal lands inside the phase under test whether the
machine is fast or loaded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

POLL_S = 0.0005


def state(pid: int) -> str:
    """The process's state letter in /proc (R, S, T, Z, ...); '' once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def handles_sigterm(pid: int) -> bool:
    """Whether process `pid` has installed a handler for SIGTERM (its first instruction ran)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:"))[7:], 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def halted(proc: subprocess.Popen[str]) -> bool:
    """Whether the process has stopped itself (at a fault point) or ended."""
    return state(proc.pid) in ("T", "t", "Z", "")


def wait_until(
    condition: Callable[[], bool], proc: subprocess.Popen[str] | None = None, timeout: float = 120
) -> float:
    """Poll until `condition()` holds; the instant it did. Fails if `proc` ends first, or late."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and state(proc.pid) in ("Z", ""):
            _, err = proc.communicate()
            pytest.fail(f"the process ended (exit {proc.returncode}) before the event: {err}")
        if time.monotonic() > deadline:
            pytest.fail(f"the event was not reached within {timeout} s")
        time.sleep(POLL_S)
    return time.monotonic()


def started(proc: subprocess.Popen[str]) -> float:
    """The instant the program's own first instruction has run (its handlers are in)."""
    return wait_until(lambda: handles_sigterm(proc.pid), proc)


def signal_within(proc: subprocess.Popen[str], sig: int, delay: float, since: float) -> None:
    """Send `sig` `delay` s after `since`, or as soon as the process halts first; then SIGCONT.

    Started with a `...:SIGSTOP` fault at the end of the phase under test, the process cannot
    leave that phase before the signal: it waits there for it.
    """
    while time.monotonic() < since + delay and not halted(proc):
        time.sleep(POLL_S)
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    threading.Thread(target=_continue_stops, args=(proc.pid,), daemon=True).start()


def _continue_stops(pid: int) -> None:
    """Continue the process whenever it stops, until it ends. A signal sent just as it stops
    itself at its fault point reaches the interpreter, whose handler runs only once the
    process runs again: without this it would hold still for ever, the signal unhandled."""
    while (now := state(pid)) not in ("Z", ""):
        if now in ("T", "t"):
            with contextlib.suppress(ProcessLookupError):  # it ended since
                os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)


def life(proc: subprocess.Popen[str], since: float) -> float:
    """Seconds from `since` until the process halts (stops at its fault point or ends); then
    it is killed and reaped."""
    wait_until(lambda: halted(proc), timeout=300)
    took = time.monotonic() - since
    proc.kill()
    proc.communicate()
    return took
