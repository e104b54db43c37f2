"""Two processes on one run: the second is refused naming the first; a dead holder is replaced."""

from __future__ import annotations

import random
import signal
import subprocess
from pathlib import Path

import pytest
from faultkit import RUN, TRIALS, Reference, finish, run, start
from processes import halted, wait_until

from meta.process.faults import POINTS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def held_at(scratch: Path, run_id: str, point: str) -> subprocess.Popen[str]:
    """A live RUN holding its run, stopped at `point` (a fault point) until SIGCONT."""
    first = start(scratch, *RUN, f"run_id={run_id}", fault=f"{point}:SIGSTOP")
    wait_until(lambda: halted(first), first)
    return first


def resumed(first: subprocess.Popen[str]) -> tuple[int, str]:
    """Let the held run go on to its end."""
    first.send_signal(signal.SIGCONT)
    return finish(first)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_second_process_on_a_live_run_is_refused_and_changes_nothing(
    trial: int, reference: Reference, scratch: Path
) -> None:
    draw = random.Random(trial)
    first = held_at(scratch, "busy", f"{draw.choice(POINTS)}@{draw.randrange(1, 4)}")  # resumable
    try:
        for second in ("force=true", "resume=true"):
            code, err = run(scratch, *RUN, "run_id=busy", second)
            assert code != 0 and err.count("\n") == 1, (second, err)
            assert f"in use by pid {first.pid}" in err, (second, err)
            assert first.poll() is None, second
    finally:
        code, err = resumed(first)
    assert code == 0, err  # the first run is untouched: it ends as if alone
    assert reference.matches(scratch / "results" / "busy")


def test_two_simultaneous_force_starts_leave_one_consistent_run(
    reference: Reference, scratch: Path
) -> None:
    procs = [start(scratch, *RUN, "run_id=twin", "force=true") for _ in range(2)]
    results = [finish(p) for p in procs]
    codes = sorted(code for code, _ in results)
    refused = [err for code, err in results if code != 0]
    assert codes[0] == 0, results
    assert all("in use by pid" in err or "already exists" in err for err in refused), refused
    assert reference.matches(scratch / "results" / "twin")


def test_a_dead_holder_is_taken_over_with_a_warning(reference: Reference, scratch: Path) -> None:
    first = start(scratch, *RUN, "run_id=dead", fault="after_commit@0")  # killed there
    assert finish(first)[0] == -signal.SIGKILL
    run_dir = scratch / "results" / "dead"
    assert (scratch / "results" / ".dead.lock").exists()  # left by the killed holder
    out, err = start(scratch, "run_id=dead", "resume=true").communicate(timeout=300)
    assert f"held by pid {first.pid}" in out and "no longer running" in out, out + err
    assert not (scratch / "results" / ".dead.lock").exists()
    assert reference.matches(run_dir)


def test_force_never_deletes_a_directory_a_live_process_holds(
    reference: Reference, scratch: Path
) -> None:
    first = held_at(scratch, "keep", "after_commit@0")
    run_dir = scratch / "results" / "keep"
    try:
        config = (run_dir / "configuration.yaml").read_text()
        code, err = run(scratch, *RUN, "run_id=keep", "force=true")
        assert code != 0 and "in use by pid" in err, err
        assert (run_dir / "configuration.yaml").read_text() == config
        assert (run_dir / "Brain" / "checkpoint.pt").is_file()
        assert first.poll() is None
    finally:
        code, err = resumed(first)
    assert code == 0, err
    assert reference.matches(run_dir)
