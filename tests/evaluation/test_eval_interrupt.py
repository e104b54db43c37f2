"""meta-eval stopped while it pretrains the joint baselines: one line, and a rerun goes on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tinyconfig import TINY, TINY_EVAL

from meta.run.faults import FAULT_ENV

pytestmark = pytest.mark.integration  # meta-eval runs as a process

EVAL = ["run_id=s-seed_0", "eval.run_ids=[s-seed_0,s-seed_1]", *TINY_EVAL]


def _run(
    program: str, args: list[str], cwd: Path, fault: str = ""
) -> subprocess.CompletedProcess[str]:
    """`meta-train` or `meta-eval` as a process, with a fault point (a real signal) if given."""
    code = f"import sys; from meta.cli import {program}; sys.argv[0] = 'x'; {program}()"
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({"WANDB_MODE": "offline", **({FAULT_ENV: fault} if fault else {})})
    command = [sys.executable, "-c", code, *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("grouped", ["false", "true"])
@pytest.mark.parametrize(
    "fault",
    ["inner_training@0:SIGINT", "before_commit@1:SIGINT"],
    ids=["nothing-committed", "resumable"],
)
def test_an_interrupted_joint_pretraining_says_so_in_one_line_and_goes_on(
    grouped: str, fault: str, tmp_path: Path
) -> None:
    trained = _run(
        "train_main",
        [*TINY, "meta.steps=3", "seeds=[0,1]", "runtime=batched", "run_id=s"],
        tmp_path,
    )
    assert trained.returncode == 0, trained.stderr
    args = [*EVAL, f"eval.batched_joint={grouped}"]
    # SIGINT in a joint baseline's first inner training (nothing to resume: it starts over) or
    # as it commits its second meta-step (it resumes); the fault reaches every run's loop
    stopped = _run("eval_main", [*args, "eval.out_dir=cut"], tmp_path, fault)
    assert stopped.returncode == 130, stopped.stderr
    line = stopped.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("meta-eval: error: joint pretraining"), line
    assert "run this meta-eval again to go on from there" in line and "Traceback" not in line
    assert "force=true" not in line and "Resume with" not in line  # meta-train's, not meta-eval's
    joints = [tmp_path / "results" / f"s-seed_{s}" / "eval" / "joint" for s in (0, 1)]
    assert not any((j / "Brain.pt").exists() for j in joints)
    again = _run("eval_main", [*args, "eval.out_dir=cut"], tmp_path)
    assert again.returncode == 0, again.stderr
    resumed = [(j / "Brain.pt").read_bytes() for j in joints]
    for j in joints:  # the same pretrainings from nothing, uninterrupted
        shutil.rmtree(j)
    whole = _run("eval_main", [*args, "eval.out_dir=whole"], tmp_path)
    assert whole.returncode == 0, whole.stderr
    assert [(j / "Brain.pt").read_bytes() for j in joints] == resumed
