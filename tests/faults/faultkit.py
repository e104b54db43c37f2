"""Helpers of the fault-injection tests: meta-train as a process, and what a run left on disk.

`META_HARNESS_FAULT_TRIALS` sets how many random-kill and race trials run (2 by default, for
CI); `python experiments/fault_trials.py` runs the full count and prints the table.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

TRIALS = int(os.environ.get("META_HARNESS_FAULT_TRIALS", "2"))
RUN = ["experiment=tiny", "logger=quiet", "logger.per_update_csv=true", "meta.steps=4", "seed=5"]
STARTUP_END = "inner_training@0:SIGSTOP"
"""RUN's start-up ends where meta-step 0 starts training: the process holds still there."""
RUN_END = "after_release@4:SIGSTOP"
"""RUN's last point, after its lock is released: the process holds still there."""
RESUME = ["run_id=done", "resume=true", "meta.steps=6"]
"""The resume of a finished RUN by two more meta-steps."""
RESUME_END = "inner_training@4:SIGSTOP"
"""A RESUME's start-up ends where its first meta-step (4) starts training."""
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "META_HARNESS_FAULT")},
    "WANDB_MODE": "offline",
}


def command(*args: str) -> list[str]:
    """meta-train as a process (the console script's module, so no PATH lookup)."""
    return [sys.executable, "-m", "meta", *args]


def start(cwd: Path, *args: str, fault: str | None = None) -> subprocess.Popen[str]:
    """Start meta-train in `cwd`; `fault` is a META_HARNESS_FAULT spec."""
    env = {**ENV, **({"META_HARNESS_FAULT": fault} if fault else {})}
    return subprocess.Popen(
        command(*args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    """Wait for a process; its exit code and stderr."""
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def run(cwd: Path, *args: str, fault: str | None = None) -> tuple[int, str]:
    """Run meta-train to its end; exit code and stderr."""
    return finish(start(cwd, *args, fault=fault))


def done_line(proc: subprocess.Popen[str]) -> float:
    """Read the process's output up to its `meta-train: done` line; the instant it came."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("meta-train: done"):
            return time.monotonic()
    raise AssertionError(f"no 'meta-train: done' line; exit {proc.wait()}")


def weights(path: Path) -> dict[str, torch.Tensor]:
    """A state_dict from disk."""
    return torch.load(path, map_location="cpu", weights_only=True)


def same_weights(a: Path, b: Path) -> bool:
    """Bitwise equality of two saved state_dicts."""
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def table(path: Path, drop: tuple[str, ...] = ("wall_time_s",)) -> list[list[str]]:
    """A CSV's rows without its timing columns (they differ between runs by nature)."""
    lines = list(csv.reader(io.StringIO(path.read_text())))
    keep = [i for i, name in enumerate(lines[0]) if name not in drop]
    return [[row[i] for i in keep] for row in lines]


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` by content hash (to show nothing on disk changed)."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run of RUN: what every interrupted-and-resumed run must equal."""

    run_dir: Path

    def matches(self, run_dir: Path) -> bool:
        """Final weights bitwise equal, and complete tables equal but for timings."""
        return (
            same_weights(self.run_dir / "Brain.pt", run_dir / "Brain.pt")
            and table(self.run_dir / "meta_steps.csv") == table(run_dir / "meta_steps.csv")
            and table(self.run_dir / "inner_updates.csv") == table(run_dir / "inner_updates.csv")
        )


def resume_until_done(cwd: Path, run_id: str, tries: int = 3) -> tuple[int, str]:
    """Resume as the printed command says until the run completes."""
    code, err = 1, ""
    for _ in range(tries):
        code, err = run(cwd, f"run_id={run_id}", "resume=true")
        if code == 0:
            break
    return code, err
