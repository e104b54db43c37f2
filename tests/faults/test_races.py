"""Two processes on one run: the second is refused naming the first; a dead holder is replaced."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from faultkit import RUN, TRIALS, Reference, finish, run, start

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
LONG = [*RUN, "meta.steps=400"]  # runs long enough to be raced


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_second_process_on_a_live_run_is_refused_and_changes_nothing(
    trial: int,
    scratch: Path,
    wait_for: Callable[[Callable[[], bool], float], None],
) -> None:
    first = start(scratch, *LONG, "run_id=busy")
    run_dir = scratch / "results" / "busy"
    wait_for((run_dir / "Brain" / "checkpoint.pt").exists, 120)
    try:
        for second in ("force=true", "resume=true"):
            code, err = run(scratch, *LONG, "run_id=busy", second)
            assert code != 0 and err.count("\n") == 1, (second, err)
            assert f"in use by pid {first.pid}" in err, (second, err)
            assert first.poll() is None, second  # the first run is untouched and still training
    finally:
        first.send_signal(signal.SIGINT)
        code, err = finish(first)
    assert code == 130, err
    assert (run_dir / "meta_steps.csv").is_file() and (run_dir / "configuration.yaml").is_file()


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


def test_a_dead_holder_is_taken_over_with_a_warning(
    reference: Reference,
    scratch: Path,
    wait_for: Callable[[Callable[[], bool], float], None],
) -> None:
    first = start(scratch, *RUN, "run_id=dead")
    run_dir = scratch / "results" / "dead"
    wait_for((run_dir / "Brain" / "checkpoint.pt").exists, 120)
    first.send_signal(signal.SIGKILL)
    finish(first)
    assert (scratch / "results" / ".dead.lock").exists()  # left by the killed holder
    out, err = start(scratch, "run_id=dead", "resume=true").communicate(timeout=300)
    assert f"held by pid {first.pid}" in out and "no longer running" in out, out + err
    assert not (scratch / "results" / ".dead.lock").exists()
    assert reference.matches(run_dir)


def test_force_never_deletes_a_directory_a_live_process_holds(
    scratch: Path, wait_for: Callable[[Callable[[], bool], float], None]
) -> None:
    first = start(scratch, *LONG, "run_id=keep")
    run_dir = scratch / "results" / "keep"
    wait_for((run_dir / "Brain" / "checkpoint.pt").exists, 120)
    try:
        config = (run_dir / "configuration.yaml").read_text()
        code, err = run(scratch, *RUN, "run_id=keep", "force=true")
        assert code != 0 and "in use by pid" in err, err
        assert (run_dir / "configuration.yaml").read_text() == config
        assert (run_dir / "Brain" / "checkpoint.pt").is_file()
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGINT)
        finish(first)
