"""Kills at every step of a meta-step's commit and at random instants, then resume."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
from faultkit import (
    RUN,
    RUN_END,
    STARTUP_END,
    TRIALS,
    Reference,
    finish,
    resume_until_done,
    run,
    start,
)
from processes import signal_within, started, wait_until

from meta.process.faults import POINTS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


CHAIN = (
    ("after_commit", 0),
    ("after_status", 1),
    ("inner_training", 2),
    ("before_kept", 2),
    ("before_commit", 2),
    ("after_rows", 2),
    ("after_writers", 3),
)
"""Every point once, in an order RUN's 4 meta-steps reach: a kill before the commit leaves
its meta-step to be done again, one after it moves the next process on by one."""


def test_a_kill_at_each_point_of_a_meta_step_resumes_bitwise(
    reference: Reference, scratch: Path
) -> None:
    assert sorted(point for point, _ in CHAIN) == sorted(POINTS)
    code, err = run(scratch, *RUN, "run_id=k", fault="@".join(map(str, CHAIN[0])))
    assert code == -signal.SIGKILL, err
    # each resume, as the printed command says, is killed at the next point
    for point, meta_step in CHAIN[1:]:
        code, err = run(scratch, "run_id=k", "resume=true", fault=f"{point}@{meta_step}")
        assert code == -signal.SIGKILL, f"not killed at {point}@{meta_step}: {err}"
    code, err = resume_until_done(scratch, "k")
    assert code == 0, err
    assert reference.matches(scratch / "results" / "k")


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_kill_at_a_random_instant_resumes_bitwise(
    trial: int, run_life: float, reference: Reference, scratch: Path
) -> None:
    # an instant of the measured life, the process held at its last point until the kill
    delay = random.Random(trial).uniform(0.0, 1.0) * run_life
    proc = start(scratch, *RUN, "run_id=r", fault=RUN_END)
    status = scratch / "results" / "r" / "run_logs" / "training_status.json"
    began = wait_until(status.exists, proc)  # the interpreter is up and the run has begun
    signal_within(proc, signal.SIGKILL, delay, began)
    assert finish(proc)[0] == -signal.SIGKILL
    if (scratch / "results" / "r" / "Brain" / "checkpoint.pt").exists():
        code, err = resume_until_done(scratch, "r")
    else:  # killed before the first commit: nothing to resume, the run starts over
        code, err = run(scratch, *RUN, "run_id=r", "force=true")
    assert code == 0, err
    assert reference.matches(scratch / "results" / "r")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_stop_cleanly_and_resume_bitwise(
    sig: signal.Signals, code: int, reference: Reference, scratch: Path
) -> None:
    # sent once the first meta-step is committed; the process waits at meta-step 2 for it
    proc = start(scratch, *RUN, "run_id=s", fault="after_writers@2:SIGSTOP")
    checkpoint = scratch / "results" / "s" / "Brain" / "checkpoint.pt"
    signal_within(proc, sig, 0.0, wait_until(checkpoint.exists, proc))
    returncode, err = finish(proc)
    assert returncode == code, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "Resume with: meta-train run_id=s resume=true" in err
    resumed, err = resume_until_done(scratch, "s")
    assert resumed == 0, err
    assert reference.matches(scratch / "results" / "s")


def test_ctrl_c_during_start_up_is_one_line_without_a_resume_command(
    startup_life: float, scratch: Path
) -> None:
    proc = start(scratch, *RUN, "run_id=early", fault=STARTUP_END)
    signal_within(proc, signal.SIGINT, 0.4 * startup_life, started(proc))  # imports under way
    returncode, err = finish(proc)
    assert returncode == 130, err
    assert "Traceback" not in err and "Resume with" not in err, err
    assert err.count("\n") == 1, err
