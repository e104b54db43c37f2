"""meta-train runtime=batched as users run it: θ as runtime=local's to rounding, resumed bitwise."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from meta.run.faults import FAULT_ENV

pytestmark = pytest.mark.integration  # meta-train runs as a process

TOLERANCE = 1e-5
"""max |Δθ| between runtime=local and runtime=batched: the stacks round differently."""
RUN = ["experiment=tiny", "logger=quiet", "meta.meta_batch_size=3", "meta.steps=3"]


def _meta_train(cwd: Path, *args: str, fault: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({"WANDB_MODE": "offline", **({FAULT_ENV: fault} if fault else {})})
    command = [sys.executable, "-m", "meta", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _theta(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "Brain.pt", weights_only=True)


def test_batched_theta_is_locals_to_rounding_and_a_killed_run_resumes_bitwise(
    tmp_path: Path,
) -> None:
    for run_id, runtime in (("local", "local"), ("whole", "batched")):
        done = _meta_train(tmp_path, *RUN, f"runtime={runtime}", f"run_id={run_id}")
        assert done.returncode == 0, done.stderr
    killed = _meta_train(tmp_path, *RUN, "runtime=batched", "run_id=cut", fault="after_writers@1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _meta_train(tmp_path, "run_id=cut", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    results = tmp_path / "results"
    local, whole, cut = (_theta(results / name) for name in ("local", "whole", "cut"))
    assert all(torch.equal(whole[k], cut[k]) for k in whole)
    delta = max(float((local[k] - whole[k]).abs().max()) for k in local)
    steps = list(csv.DictReader((results / "whole" / "meta_steps.csv").open()))
    assert len(steps) == 3 * 3  # a row per inner training
    moved = min(float(row["theta_delta_norm"]) for row in steps)
    assert delta < TOLERANCE < moved / 100  # far below what one meta-step moves θ


def test_batched_with_unity_builds_is_refused_in_one_line(tmp_path: Path) -> None:
    refused = _meta_train(tmp_path, *RUN, "runtime=batched", "env=unity", "run_id=x")
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0
    assert "runtime=batched stacks native tasks only" in refused.stderr
    assert not (tmp_path / "results" / "x").exists()
