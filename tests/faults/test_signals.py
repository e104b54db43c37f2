"""Ctrl-C and SIGTERM at any instant: exit 130 / 143 and one line, never a traceback or an abort.

Start-up signals are timed from the instant the program's own first instruction has run: the
moment its SIGTERM handler shows in /proc/<pid>/status (before it, the interpreter itself is
starting and the signal's default action applies, as for any program). Their delays are
fractions of the start-up measured on this machine, and the process holds still at the end of
its start-up (a SIGSTOP fault point) until the signal has come, so that every instant drawn is
one of start-up, on a fast machine as on a loaded one.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import (
    RESUME,
    RESUME_END,
    RUN,
    STARTUP_END,
    TRIALS,
    Reference,
    done_line,
    finish,
    resume_until_done,
    run,
    snapshot,
    start,
)
from processes import signal_within, started, wait_until

from meta.process.faults import END_POINTS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]
FRACTIONS = [0.0, 0.002, 0.007, 0.02, 0.035, 0.07, 0.13, 0.27, 0.5, 1.0]
"""Of the measured start-up: dense where the imports are, up to its end."""


def _assert_one_line(returncode: int, code: int, err: str) -> None:
    assert returncode == code, (returncode, err)
    assert err.count("\n") == 1 and "Traceback" not in err and "what()" not in err, err


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
@pytest.mark.parametrize("fraction", FRACTIONS)
def test_a_signal_at_start_up_is_one_line_and_writes_nothing(
    sig: int, code: int, fraction: float, startup_life: float, scratch: Path
) -> None:
    proc = start(scratch, *RUN, "run_id=early", fault=STARTUP_END)
    signal_within(proc, sig, fraction * startup_life, started(proc))
    returncode, err = finish(proc)
    _assert_one_line(returncode, code, err)
    assert "Resume with" not in err, err
    assert not (scratch / "results" / "early" / "Brain" / "checkpoint.pt").exists()
    if "nothing was written" in err:
        assert not (scratch / "results" / "early").exists()


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_signal_at_a_random_instant_of_a_resume_start_up_changes_nothing(
    trial: int, resume_life: float, copy: Path
) -> None:
    sig, code = random.Random(trial).choice(SIGNALS)
    delay = random.Random(trial).uniform(0.0, 1.0) * resume_life
    before = snapshot(copy / "results")
    proc = start(copy, *RESUME, fault=RESUME_END)
    signal_within(proc, sig, delay, started(proc))
    returncode, err = finish(proc)
    _assert_one_line(returncode, code, err)
    after = snapshot(copy / "results")
    if "before the run" in err:
        assert after == before, err
        return
    # the status and configuration rewritten (the timers too once the writers are open)
    rewritten = {"done/configuration.yaml", "done/run_logs/training_status.json"}
    if "while the run resumed" not in err:
        assert "holds meta-steps 0..3" in err, err
        rewritten.add("done/run_logs/timers.json")
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
    ray = ("run_id=ray", "runtime=ray", "runtime.num_actors=1")
    proc = start(scratch, *RUN, *ray, fault=STARTUP_END)
    me = psutil.Process(proc.pid)
    wait_until(lambda: bool(me.children()), proc)  # Ray's processes are starting
    children = me.children(recursive=True)
    signal_within(proc, sig, 0.0, 0.0)
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
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.6])
def test_a_signal_while_the_program_exits_is_its_code_or_none(
    sig: int, code: int, fraction: float, exit_life: float, scratch: Path
) -> None:
    # CPython drops the handlers before it tears the modules down (about a second with torch):
    # the program ends without that teardown, and a signal in its last instants ends it with its
    # code and line, or comes after its exit 0 (a few ms measured from 'done' to the exit)
    proc = start(scratch, *RUN, "run_id=exiting")
    signal_within(proc, sig, fraction * exit_life, done_line(proc))
    returncode, err = finish(proc)
    assert returncode in (0, code), (returncode, err)
    assert (scratch / "results" / "exiting" / "Brain.pt").is_file()
    assert not (scratch / "results" / ".exiting.lock").exists()
    if returncode == 0:
        assert err == "", err
    else:
        _assert_one_line(returncode, code, err)
        assert "after the run completed" in err, err
