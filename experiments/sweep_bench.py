"""`python experiments/sweep_bench.py`: a sweep sequentially and with the joblib launcher; with
`--search`, a search's batch of trials trained as one group against one process per trial.

Runs the same Hydra multirun (2 settings x 3 seeds by default) twice, each into a fresh
results_dir: once with Hydra's basic launcher (one job after the other) and once with the joblib
launcher, `--jobs` at a time; then `meta-report` on each. Prints each wall time with the load
average before and after it (`os.getloadavg`, what `uptime` shows), and checks that the two
sweeps' meta_steps.csv agree but for wall times. It prints figures and asserts nothing.

    python experiments/sweep_bench.py             # 100 meta-steps of experiment=hidden_goal a run
    python experiments/sweep_bench.py --steps 4 meta.meta_batch_size=2   # a quick look

`--search` runs `--trials` (16) trials of the committed `hparams_search=reptile_optuna` space
on `experiment=hidden_goal`, shrunk to minutes (SHRUNK): `--steps` meta-steps a trial (8),
with `--budget small` `ppo.max_steps` in {1024, 2048, 4096} with `ppo.buffer_size=1024
ppo.batch_size=256` (`--budget committed`: the space's {2048, 4096, 8192} over buffers of
2048), and an objective measured on one task after
one adaptation update (`eval.budgets=[0,1] eval.tasks_per_family=1 ...`). Each search is run
twice per `network.hidden_units` (`--units`, 64 and 128), each into a fresh results_dir: all
trials asked at once (`hydra.sweeper.n_jobs=<trials>`) and trained as one group, each
meta-step's stacks shared out to `--jobs` worker processes (`runtime.workers=2`; `--group
torch_threads=2`: in one process on two threads instead), then the
same trials on the joblib launcher, `--jobs` processes
at a time (`hydra/launcher=joblib hydra.launcher.n_jobs=2`). It prints the wall times to each
command's exit and to its search's last write (`optimization_results.yaml`: joblib's workers
may outlive the search), their ratios and the load averages, and whether both made the same runs.

    python experiments/sweep_bench.py --search                     # the measurement
    python experiments/sweep_bench.py --search --trials 4 --steps 2 --units 64   # a quick look
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


SHRUNK = [
    *("-m", "hparams_search=reptile_optuna", "experiment=hidden_goal", "logger=quiet"),
    *("eval.budgets=[0,1]", "eval.tasks_per_family=1", "eval.seeds=2", "eval.buffer_size=256"),
    *("eval.eval_episodes=8", "optimized_metric=success_iqm@1"),
]
"""The committed search's space and objective, shrunk to minutes (see the docstring)."""
BUDGETS = {
    "small": ["ppo.buffer_size=1024", "ppo.batch_size=256", "ppo.max_steps=choice(1024,2048,4096)"],
    "committed": [],
}
"""`--budget`: the inner trainings of the committed space at half size, or as committed."""


def runs(folder: Path) -> list[str]:
    """The run ids of a sweep's folder."""
    return sorted(p.name for p in folder.iterdir() if (p / "configuration.yaml").is_file())


def search(args: argparse.Namespace) -> None:
    """Each width's search as one group and on the joblib launcher: wall times to the exit and
    to the search's last write (optimization_results.yaml), and their ratios."""
    trials = [f"hydra.sweeper.n_trials={args.trials}", f"hydra.sweeper.n_jobs={args.trials}"]
    base = [sys.executable, "-m", "meta", *SHRUNK, *BUDGETS[args.budget], *trials]
    base.append(f"meta.steps={args.steps}")
    joblib = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.jobs}"]
    print(f"search: {' '.join(base[3:])} {' '.join(args.overrides)}")
    group_label = f"{args.trials} trials as one group ({' '.join(args.group) or 'runtime.workers'})"
    with tempfile.TemporaryDirectory() as tmp:
        for units in args.units:
            out = {name: Path(tmp) / f"{name}_{units}" for name in ("group", "joblib")}
            command = [*base, f"network.hidden_units={units}", *args.overrides]
            walls, written = {}, {}
            for name, extra, label in (
                ("group", args.group or [f"runtime.workers={args.jobs}"], group_label),
                ("joblib", joblib, f"{args.trials} trials on joblib, {args.jobs} at a time"),
            ):
                started = time.time()
                walls[name] = timed(
                    [*command, *extra, f"results_dir={out[name]}"], f"{units} units, {label}"
                )
                written[name] = (out[name] / "optimization_results.yaml").stat().st_mtime - started
                print(f"{units} units, {name}: the search's last write after {written[name]:.1f} s")
            exits, writes = walls["joblib"] / walls["group"], written["joblib"] / written["group"]
            print(f"{units} units: joblib / group = {exits:.2f}x to the exit, {writes:.2f}x to it")
            print(f"{units} units: the same runs: {runs(out['group']) == runs(out['joblib'])}")


def main() -> None:
    """Parse the arguments, run both sweeps and both reports (or, `--search`, the searches)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, help="meta.steps of each run (100; --search: 8)")
    p.add_argument("--jobs", type=int, default=2, help="joblib jobs at a time (2)")
    p.add_argument("--search", action="store_true", help="a search as one group vs joblib")
    p.add_argument("--trials", type=int, default=16, help="--search: trials (16)")
    p.add_argument(
        "--units", type=int, nargs="+", default=[64, 128], help="--search: hidden units (64 128)"
    )
    p.add_argument(
        "--budget", choices=sorted(BUDGETS), default="small", help="--search: inner budgets (small)"
    )
    p.add_argument(
        "--group",
        nargs="+",
        default=[],
        help="--search: the group's own overrides (runtime.workers=<jobs>), e.g. torch_threads=2",
    )
    p.add_argument("overrides", nargs="*", help="more meta-train overrides")
    args = p.parse_args()
    if args.search:
        args.steps = args.steps or 8
        search(args)
        return
    args.steps = args.steps or 100
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
