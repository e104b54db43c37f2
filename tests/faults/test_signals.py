"""Ctrl-C and SIGTERM at any instant: exit 130 / 143 and one line, never a traceback or an abort.

Start-up signals are timed from the instant the program's own first instruction has run: the
moment its SIGTERM handler shows in /proc/<pid>/status (before it, the interpreter itself is
starting and the signal's default action applies, as for any program).
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import RUN, TRIALS, Reference, finish, resume_until_done, run, snapshot, start

from meta.run.faults import END_POINTS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]
DELAYS = [0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.5, 3.0]


def handles_sigterm(pid: int) -> bool:
    """Whether process `pid` has installed a handler for SIGTERM (its first instruction ran)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True  # it has ended already: finish() will tell how
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:"))[7:], 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def signal_at_start_up(proc: subprocess.Popen[str], sig: int, delay: float) -> None:
    """Send `sig` `delay` seconds after the program's first instruction."""
    deadline = time.monotonic() + 60
    while not handles_sigterm(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.0005)
    time.sleep(delay)
    proc.send_signal(sig)


def _assert_one_line(returncode: int, code: int, err: str) -> None:
    assert returncode == code, (returncode, err)
    assert err.count("\n") == 1 and "Traceback" not in err and "what()" not in err, err


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
@pytest.mark.parametrize("delay", DELAYS)
def test_a_signal_at_start_up_is_one_line_and_writes_nothing(
    sig: int, code: int, delay: float, scratch: Path
) -> None:
    proc = start(scratch, *RUN, "run_id=early")
    signal_at_start_up(proc, sig, delay)
    returncode, err = finish(proc)
    if returncode == 0:
        pytest.skip("the run ended before the signal arrived")
    _assert_one_line(returncode, code, err)
    assert "Resume with" not in err, err
    if "nothing was written" in err:
        assert not (scratch / "results" / "early").exists()


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_signal_at_a_random_instant_of_a_resume_start_up_changes_nothing(
    trial: int, copy: Path
) -> None:
    sig, code = random.Random(trial).choice(SIGNALS)
    delay = random.Random(trial).uniform(0.0, 6.0)
    before = snapshot(copy / "results")
    proc = start(copy, "run_id=done", "resume=true", "meta.steps=6")
    signal_at_start_up(proc, sig, delay)
    returncode, err = finish(proc)
    _assert_one_line(returncode, code, err)
    if "before the run" in err:
        assert snapshot(copy / "results") == before, err
    elif "while the run resumed" in err:  # the status and configuration written, nothing else
        after = snapshot(copy / "results")
        rewritten = {"done/configuration.yaml", "done/run_logs/training_status.json"}
        assert all(after[k] == v for k, v in before.items() if k not in rewritten), err


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
@pytest.mark.parametrize("point", END_POINTS)
def test_a_signal_after_the_final_status_leaves_the_run_complete(
    sig: signal.Signals, code: int, point: str, reference: Reference, scratch: Path
) -> None:
    returncode, err = run(scratch, *RUN, "run_id=end", fault=f"{point}@4:{sig.name}")
    _assert_one_line(returncode, code, err)
    assert "after the run completed" in err and "is complete" in err, err
    assert reference.matches(scratch / "results" / "end")
    assert not (scratch / "results" / ".end.lock").exists()


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
def test_a_signal_during_a_commit_waits_for_it_and_resumes_bitwise(
    sig: signal.Signals, code: int, reference: Reference, scratch: Path
) -> None:
    returncode, err = run(scratch, *RUN, "run_id=mid", fault=f"before_commit@1:{sig.name}")
    _assert_one_line(returncode, code, err)
    assert "holds meta-steps 0..1" in err, err
    resumed, err = resume_until_done(scratch, "mid")
    assert resumed == 0, err
    assert reference.matches(scratch / "results" / "mid")


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), SIGNALS)
def test_a_signal_during_ray_start_up_stops_the_cluster_it_started(
    sig: int, code: int, scratch: Path
) -> None:
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("ray")
    proc = start(scratch, *RUN, "run_id=ray", "runtime=ray", "runtime.num_actors=1")
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while not me.children() and time.monotonic() < deadline:  # Ray's processes are starting
        time.sleep(0.01)
    children = me.children(recursive=True)
    proc.send_signal(sig)
    returncode, err = finish(proc)
    _assert_one_line(returncode, code, err)
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, [(p.pid, p.name()) for p in alive]


def test_a_ctrl_c_caught_inside_code_run_from_a_string_still_exits_130(tmp_path: Path) -> None:
    """A Ctrl-C that lands while a module defines a dataclass (code exec'd from a string), once
    handled, must not turn the exit into death by SIGINT under `python -m` (CPython notes it)."""
    (tmp_path / "interrupted_here.py").write_text(
        "import sys\n"
        "from meta.cli import fail\n"
        "try:\n"
        "    exec('raise KeyboardInterrupt')  # where dataclasses and namedtuples run their code\n"
        "except KeyboardInterrupt:\n"
        "    fail('meta-train', 'interrupted; nothing was written', 130)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "interrupted_here"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr == "meta-train: error: interrupted; nothing was written\n"


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
def test_a_signal_while_the_program_exits_is_its_code_or_none(
    sig: int, code: int, scratch: Path
) -> None:
    # CPython drops the handlers before it tears the modules down (about a second with torch)
    proc = start(scratch, *RUN, "run_id=exiting")
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("meta-train: done"):
            break
    time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    returncode, err = finish(proc)
    assert returncode in (0, code), (returncode, err)
    if returncode == code:
        _assert_one_line(returncode, code, err)
        assert "after the run completed" in err, err
