"""`python experiments/sweep_bench.py`: a sweep sequentially and with the joblib launcher.

Runs the same Hydra multirun (2 settings x 3 seeds by default) twice, each into a fresh
results_dir: once with Hydra's basic launcher (one job after the other) and once with the joblib
launcher, `--jobs` at a time; then `meta-report` on each. Prints each wall time with the load
average before and after it (`os.getloadavg`, what `uptime` shows), and checks that the two
sweeps' meta_steps.csv agree but for wall times. It prints figures and asserts nothing.

    python experiments/sweep_bench.py             # 100 meta-steps of experiment=hidden_goal a run
    python experiments/sweep_bench.py --steps 4 meta.meta_batch_size=2   # a quick look
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = ["seed=0,1,2", "meta.outer_lr=0.1,0.5"]
TRAIN = ["experiment=hidden_goal", "logger=quiet"]


def load() -> str:
    """The 1, 5 and 15 min load averages."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def timed(command: list[str], label: str) -> float:
    """Run `command`, print its wall time with the load before and after; return the time."""
    before = load()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{label} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    print(f"{label}: {wall:.1f} s wall (load before {before}; after {load()})", flush=True)
    return wall


def same_rows(a: Path, b: Path) -> bool:
    """Whether two sweeps' runs have the same meta_steps.csv rows but for wall_time_s."""
    runs = sorted(p.name for p in a.iterdir() if (p / "meta_steps.csv").is_file())
    if runs != sorted(p.name for p in b.iterdir() if (p / "meta_steps.csv").is_file()):
        return False
    for run in runs:
        rows = [list(csv.DictReader((d / run / "meta_steps.csv").open())) for d in (a, b)]
        for row in (r for table in rows for r in table):
            row.pop("wall_time_s")
        if rows[0] != rows[1]:
            return False
    return True


def main() -> None:
    """Parse the arguments, run both sweeps and both reports."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="meta.steps of each run (100)")
    p.add_argument("--jobs", type=int, default=2, help="joblib jobs at a time (2)")
    p.add_argument("overrides", nargs="*", help="more meta-train overrides")
    args = p.parse_args()
    train = [sys.executable, "-m", "meta", "-m", *SWEEP, *TRAIN, f"meta.steps={args.steps}"]
    train += args.overrides
    with tempfile.TemporaryDirectory() as tmp:
        out = {name: Path(tmp) / name for name in ("sequential", "joblib")}
        print(f"sweep: {' '.join(SWEEP)} {' '.join(TRAIN[:1])} meta.steps={args.steps}")
        walls = {"sequential": timed([*train, f"results_dir={out['sequential']}"], "sequential")}
        joblib = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.jobs}"]
        walls["joblib"] = timed(
            [*train, *joblib, f"results_dir={out['joblib']}"], f"joblib, {args.jobs} at a time"
        )
        print(f"speed-up: {walls['sequential'] / walls['joblib']:.2f}x")
        print(f"same meta_steps.csv rows (wall times aside): {same_rows(*out.values())}")
        report = [sys.executable, "-c", "from meta.report.cli import main; main()"]
        for name, folder in out.items():
            timed([*report, str(folder)], f"meta-report on the {name} sweep")


if __name__ == "__main__":
    main()
