"""`mlagents-learn` 1.1.0 against `meta-train meta=single` (ppo=mlagents and default), same task.

Needs ML-Agents 1.1.0 in a virtualenv of its own (docs/unity-and-interop.md says how). From the
project root, with the project's interpreter, at a low priority (each run is one process; `--jobs`
run at once):

    nice -n 10 python experiments/mlagents_ppo.py --mlagents-venv <dir> [--work <dir>]
        [--tasks FindTarget CarryObject] [--seeds 5] [--first-seed 1] [--jobs 2]
        [--trainers ...] [--reuse TRAINER ...] [--reuse-from <curves.csv> ...] [--out <dir>]

Every trainer trains 15 buffers of 10,240 agent-steps (153,600 steps; the points are labelled
10k..150k) on the build's default task: `mlagents-learn` on `envs/builds/<task>` (16 areas,
no environment parameters sent), ours on the native task with the same parameters (the
family's defaults, the ones the build uses when none are sent; the build serves that native
task step for step). Settings: batch 1024, buffer 10240, lr 3e-4, beta 5e-3, epsilon 0.2,
lambd 0.95, 3 epochs, 2 x 128, normalize false, time horizon 64, gamma 0.99, all three
schedules linear to the run's end. Ours is one `meta=single` training of the whole run
(`meta.steps=1`), as mlagents-learn trains. Reward and success per 10,240 steps are read from
mlagents-learn's TensorBoard events and from our inner_updates.csv (each update's steps and
the mean return and success of the episodes its buffer finished). A run that finished in
`--work` (its `.wall` file) is not run again, so an interrupted comparison continues. Writes
`<out>/curves.csv` (every run's points), `<out>/summary.csv` (mean, min, max over seeds),
`<out>/<task>.png` and prints the band check:
is each trainer's mean inside mlagents-learn's seed band (min..max) at every point from 30k?
and, at those points, the largest difference of its mean from mlagents-learn's with the
smallest p of Welch's t-test (per point, uncorrected for the 13 points).
A reused trainer's curves are every seed of it that the --reuse-from files hold: the
comparisons of two sets of seeds read together with `--trainers --reuse mlagents-learn
ppo=mlagents --reuse-from <first>/curves.csv <second>/curves.csv --out <dir>`.
Trainers `ablate-<row>` are `ppo=mlagents` with one row of docs/mlagents-fidelity.md set to
the default's behaviour (see ABLATIONS).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from envs.backend.host import free_ports

ROOT = Path(__file__).resolve().parent.parent
BUFFERS, BUFFER, AREAS = 15, 10240, 16
BAND_FROM = 30000
TASK_PARAMS = {
    "FindTarget": "motor_rotation: 0.0, agent_speed: 0.2, target_radius: 1.0, goal_x: 0.5, "
    "goal_y: 0.5",
    "CarryObject": "motor_rotation: 0.0, agent_speed: 0.2, carry_speed: 0.7, goal_radius: 1.25",
}
OURS = {
    "ppo=mlagents": ["ppo=mlagents"],
    "default": [],
}
ABLATIONS = {
    "1 schedule_timing": ["ppo.schedule_timing=before_buffer"],
    "2 buffer_assembly": ["ppo.buffer_assembly=steps"],
    "3 max_grad_norm": ["ppo.max_grad_norm=0.5"],
    "4 advantage_normalization": ["ppo.advantage_normalization=minibatch"],
    "5 ratio": ["ppo.ratio=joint"],
    "6 entropy": ["ppo.entropy=sum"],
    "7 adam_epsilon": ["ppo.adam_epsilon=1e-7"],
    "10 action_scale": ["ppo.action_scale=1.0", "network.initial_log_std=0.0"],
    "11 initialization": ["network.initialization=orthogonal"],
}
for _row, _overrides in ABLATIONS.items():
    OURS[f"ablate-{_row.split()[0]}"] = ["ppo=mlagents", *_overrides]
MLAGENTS = "mlagents-learn"
TRAINER_CONFIG = f"""\
behaviors:
  Brain:
    trainer_type: ppo
    hyperparameters: {{batch_size: 1024, buffer_size: {BUFFER}, learning_rate: 3.0e-4,
                      beta: 5.0e-3, epsilon: 0.2, lambd: 0.95, num_epoch: 3}}
    network_settings: {{normalize: false, hidden_units: 128, num_layers: 2}}
    reward_signals: {{extrinsic: {{gamma: 0.99, strength: 1.0}}}}
    keep_checkpoints: 1
    checkpoint_interval: 10000000
    max_steps: {BUFFERS * BUFFER}
    time_horizon: 64
    summary_freq: {BUFFER}
env_settings: {{num_areas: {AREAS}}}
"""
REWARD = "Environment/Cumulative Reward"
SUCCESS = "Environment/Success"


@dataclass(frozen=True)
class Run:
    """One training: a trainer on a task with a seed."""

    task: str
    trainer: str
    seed: int

    @property
    def run_id(self) -> str:
        """A directory name for it."""
        return f"{self.task}-{re.sub('[^A-Za-z0-9]+', '_', self.trainer)}-{self.seed}"


Curves = list[dict[int, tuple[float, float]]]
"""Runs' curves: per run, step -> (mean reward, success)."""


def main() -> None:
    """Parse, check, run what is missing, then read, write and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlagents-venv", type=Path, help="virtualenv with mlagents 1.1.0")
    parser.add_argument("--work", type=Path, default=Path("results") / "mlagents_ppo")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "mlagents_ppo")
    parser.add_argument("--tasks", nargs="+", default=list(TASK_PARAMS), choices=TASK_PARAMS)
    parser.add_argument("--seeds", type=int, default=5, help="seeds per trainer")
    parser.add_argument("--first-seed", type=int, default=1, help="the first trained seed")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--stacked",
        action="store_true",
        help="train our trainers' seeds of a task as one stack (seeds=[...]), not one by one",
    )
    parser.add_argument(
        "--trainers", nargs="*", default=[MLAGENTS, "ppo=mlagents", "default"], help="to train"
    )
    parser.add_argument(
        "--reuse",
        nargs="+",
        default=[],
        metavar="TRAINER",
        help="trainers whose curves (every seed there) are read from --reuse-from, not trained",
    )
    parser.add_argument(
        "--reuse-from",
        type=Path,
        nargs="+",
        help="earlier comparisons' curves.csv files (default: <out>/curves.csv)",
    )
    args = parser.parse_args()
    unknown = [t for t in args.trainers + args.reuse if t != MLAGENTS and t not in OURS]
    if unknown:
        parser.error(f"unknown trainer {unknown[0]!r} (known: {MLAGENTS}, {', '.join(OURS)})")
    if not args.trainers and not args.reuse:
        parser.error("nothing to compare: name --trainers, --reuse or both")
    both = sorted(set(args.trainers) & set(args.reuse))
    if both:
        parser.error(f"trainer {both[0]!r} is both trained and reused: name it in one of the two")
    if args.seeds < 1 or args.jobs < 1 or args.first_seed < 1:
        parser.error("--seeds, --first-seed and --jobs must be at least 1")
    learn = args.mlagents_venv / "bin" / "mlagents-learn" if args.mlagents_venv else None
    if MLAGENTS in args.trainers and (learn is None or not learn.exists()):
        parser.error("--mlagents-venv must be a virtualenv with mlagents-learn 1.1.0")
    work = args.work.resolve()
    runs = [
        Run(task, trainer, seed)
        for task in args.tasks
        for trainer in args.trainers
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]
    earlier = args.reuse_from or [args.out / "curves.csv"]
    kept = reused(earlier, args.reuse, args.tasks)  # before training
    started = time.monotonic()
    alone = [run for run in runs if run.trainer == MLAGENTS or not args.stacked]
    stacks = [
        [run for run in runs if (run.task, run.trainer) == key]
        for key in dict.fromkeys((run.task, run.trainer) for run in runs if run not in alone)
    ]
    with ThreadPoolExecutor(args.jobs) as pool:
        walls = list(pool.map(lambda run: train(run, work, learn), alone))
        walls += list(pool.map(lambda group: train_stacked(group, work), stacks))
    total = time.monotonic() - started
    curves = {run: read_curve(run, work) for run in runs} | kept
    write_outputs(args.out, curves)
    print(f"wall time: {total:.0f} s for {sum(w > 0 for w in walls)} runs trained now")
    report_walls(runs, work)


def train(run: Run, work: Path, learn: Path | None) -> float:
    """Train one run unless it finished before; its wall time in seconds (0 if skipped)."""
    results = work / "results"
    if (work / f"{run.run_id}.wall").exists():
        return 0.0
    shutil.rmtree(results / run.run_id, ignore_errors=True)
    results.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    single = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if run.trainer == MLAGENTS:
        assert learn is not None
        config = work / "trainer_config.yaml"
        config.write_text(TRAINER_CONFIG)
        command = [str(learn), str(config), f"--env={ROOT / 'envs' / 'builds' / run.task}"]
        command += [f"--run-id={run.run_id}", f"--results-dir={results}", "--no-graphics"]
        command += [f"--seed={run.seed}", f"--base-port={free_ports(3)}", "--force"]
        # the build runs on the project's interpreter, whatever mlagents-learn's is
        env = {**os.environ, **single, "META_HARNESS_PYTHON": sys.executable}
    else:
        command = ours(run, results, run.run_id, f"seed={run.seed}")
        env = {**os.environ, **single, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=work, env=env)
    (work / f"{run.run_id}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{run.run_id} failed (exit {done.returncode}): see its log in {work}")
    wall = time.monotonic() - started
    (work / f"{run.run_id}.wall").write_text(f"{wall:.1f}\n")
    print(f"{run.run_id}: {wall:.0f} s", flush=True)
    return wall


def ours(run: Run, results: Path, run_id: str, *seeds: str) -> list[str]:
    """Our trainer's command line for `run` (its seed or seeds given by `seeds`)."""
    task = f"[{{name: {run.task}, weight: 1.0, params: {{{TASK_PARAMS[run.task]}}}}}]"
    command = [sys.executable, "-m", "meta", "meta=single", *OURS[run.trainer]]
    command += ["logger=quiet", f"results_dir={results}", f"run_id={run_id}", *seeds]
    # one training of the whole run, as mlagents-learn trains: its environment and what an
    # agent has begun carry from buffer to buffer (meta=single's chunks start afresh)
    command += ["meta.steps=1", f"ppo.max_steps={BUFFERS * BUFFER}", "logger.per_update_csv=true"]
    return [*command, "network.normalize=false", f"env.num_areas={AREAS}", f"meta.tasks={task}"]


def train_stacked(runs: Sequence[Run], work: Path) -> float:
    """Our trainer's seeds of one task as one stack (`seeds=[...]`, each run's directory then
    named as when trained alone); the wall time of the whole stack (0 if every run finished)."""
    if all((work / f"{run.run_id}.wall").exists() for run in runs):
        return 0.0
    results, first = work / "results", runs[0]
    base = f"{first.task}-{re.sub('[^A-Za-z0-9]+', '_', first.trainer)}-stacked"
    seeds = "seeds=[" + ",".join(str(run.seed) for run in runs) + "]"
    command = ours(first, results, base, seeds)
    single = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    results.mkdir(parents=True, exist_ok=True)
    for run in runs:
        shutil.rmtree(results / f"{base}-seed_{run.seed}", ignore_errors=True)
    started = time.monotonic()
    done = subprocess.run(
        [*command, "force=true"],
        capture_output=True,
        text=True,
        cwd=work,
        env={**os.environ, **single},
    )
    (work / f"{base}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{base} failed (exit {done.returncode}): see its log in {work}")
    wall = time.monotonic() - started
    for run in runs:
        shutil.rmtree(results / run.run_id, ignore_errors=True)
        (results / f"{base}-seed_{run.seed}").rename(results / run.run_id)
        # each run's share of the stack's wall time
        (work / f"{run.run_id}.wall").write_text(f"{wall / len(runs):.1f}\n")
    print(f"{base}: {wall:.0f} s for {len(runs)} seeds", flush=True)
    return wall


def reused(
    paths: Sequence[Path], trainers: Sequence[str], tasks: Sequence[str]
) -> dict[Run, dict[int, tuple[float, float]]]:
    """Every curve of `trainers` on `tasks` that earlier comparisons wrote to `paths` (a run in
    two files must be the same in both)."""
    if not trainers:
        return {}
    curves: dict[Run, dict[int, tuple[float, float]]] = {}
    for path in paths:
        if not path.is_file():
            raise SystemExit(
                f"--reuse: {path} does not exist (it holds an earlier comparison's curves)"
            )
        found: dict[Run, dict[int, tuple[float, float]]] = defaultdict(dict)
        with path.open() as f:
            for row in csv.DictReader(f):
                if row["trainer"] in trainers and row["task"] in tasks:
                    run = Run(row["task"], row["trainer"], int(row["seed"]))
                    point = (float(row["reward"]), float(row["success"]))
                    found[run][int(row["steps"])] = point
        for run, curve in found.items():
            if repr(curves.setdefault(run, curve)) != repr(curve):  # NaN equals NaN here
                raise SystemExit(f"--reuse: {run.run_id} differs between the --reuse-from files")
    held = {(run.task, run.trainer) for run in curves}
    missing = [(t, r) for t in tasks for r in trainers if (t, r) not in held]
    if missing:
        raise SystemExit(f"--reuse: no {missing[0][1]} curve of {missing[0][0]} in {list(paths)}")
    return curves


def events(run: Run, work: Path) -> list[Path]:
    """mlagents-learn's TensorBoard event files that hold its curve."""
    base = work / "results" / run.run_id
    return sorted((base / "Brain").glob("events.out.tfevents.*"))


def read_curve(run: Run, work: Path) -> dict[int, tuple[float, float]]:
    """Step -> (mean reward, success) at every 10,240 steps: mlagents-learn's summaries from its
    events, ours from the updates of its one training (inner_updates.csv)."""
    steps = [BUFFER * k for k in range(1, BUFFERS + 1)]
    if run.trainer != MLAGENTS:
        return _from_updates(work / "results" / run.run_id / "inner_updates.csv", steps)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values: dict[str, dict[int, float]] = defaultdict(dict)
    for path in events(run, work):
        accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in (REWARD, SUCCESS):
            if tag in accumulator.Tags()["scalars"]:
                values[tag].update({e.step: e.value for e in accumulator.Scalars(tag)})
    missing = [s for s in steps if s not in values[REWARD]]
    if missing:
        raise SystemExit(f"{run.run_id}: no {REWARD} at step {missing[0]} in its events")
    return {s: (values[REWARD][s], values[SUCCESS].get(s, float("nan"))) for s in steps}


def _from_updates(path: Path, steps: Sequence[int]) -> dict[int, tuple[float, float]]:
    """At each point, the mean over the 10,240 steps before it, as mlagents-learn summarises:
    each update's buffer weighted by how many of its steps fall there (with
    ppo.buffer_assembly=pieces a buffer is a little over 10,240 steps and straddles points)."""
    with path.open() as f:
        rows = [(float(r["steps"]), float(r[REWARD]), float(r[SUCCESS])) for r in csv.DictReader(f)]
    if not rows or rows[-1][0] < steps[-1]:
        raise SystemExit(f"{path}: its updates end before step {steps[-1]}")
    starts = [0.0, *(r[0] for r in rows[:-1])]
    curve = {}
    for point in steps:
        overlaps = [
            (min(row[0], point) - max(start, point - BUFFER), row)
            for start, row in zip(starts, rows, strict=True)
        ]
        inside = [(w, row) for w, row in overlaps if w > 0]
        means = []
        for column in (1, 2):
            parts = [(w, row[column]) for w, row in inside if not math.isnan(row[column])]
            weight = sum(w for w, _ in parts)
            means.append(sum(w * v for w, v in parts) / weight if weight else float("nan"))
        curve[point] = (means[0], means[1])
    return curve


def label(step: int) -> int:
    """The point's label: 10,240 k steps as 10k."""
    return step // BUFFER * 10000


def write_outputs(out: Path, curves: dict[Run, dict[int, tuple[float, float]]]) -> None:
    """Curves, summary, figures, and the band check on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "curves.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "trainer", "seed", "steps", "label", "reward", "success"])
        for run, curve in curves.items():
            for step, (reward, success) in curve.items():
                row = [run.task, run.trainer, run.seed, step, label(step)]
                writer.writerow([*row, f"{reward:.4f}", f"{success:.4f}"])
    groups: dict[tuple[str, str], Curves] = defaultdict(list)
    for run, curve in curves.items():
        groups[run.task, run.trainer].append(curve)
    summary = {key: summarise(group) for key, group in groups.items()}
    with (out / "summary.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "trainer", "seeds", "label", "reward_mean", "reward_min",
                         "reward_max", "success_mean", "success_min", "success_max"])  # fmt: skip
        for (task, trainer), rows in summary.items():
            for step, stats in rows.items():
                cells = [f"{v:.4f}" for v in stats]
                writer.writerow([task, trainer, len(groups[task, trainer]), label(step), *cells])
    for task in sorted({t for t, _ in summary}):
        plot(out / f"{task}.png", task, {tr: s for (t, tr), s in summary.items() if t == task})
        band_check(task, summary, groups)
        welch_check(task, groups)
        band_odds(task, groups)


def report_walls(runs: Sequence[Run], work: Path) -> None:
    """Each task and trainer's wall time per run, as each run measured it when it trained."""
    walls: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in runs:
        recorded = work / f"{run.run_id}.wall"
        if recorded.exists():
            walls[run.task, run.trainer].append(float(recorded.read_text()))
    for (task, trainer), seconds in walls.items():
        print(
            f"{task} {trainer}: {len(seconds)} runs, {sum(seconds) / len(seconds):.0f} s each, "
            f"{sum(seconds):.0f} s in all"
        )


def summarise(group: Curves) -> dict[int, tuple[float, ...]]:
    """Per step: reward mean, min, max and success mean, min, max over seeds."""
    out: dict[int, tuple[float, ...]] = {}
    for step in group[0]:
        reward = [c[step][0] for c in group]
        success = [c[step][1] for c in group]
        out[step] = (
            sum(reward) / len(reward), min(reward), max(reward),
            sum(success) / len(success), min(success), max(success),
        )  # fmt: skip
    return out


def outside(ours: Sequence[dict[int, tuple[float, float]]], theirs: Curves) -> list[int]:
    """The band check: the steps from 30k where the mean reward of `ours` lies outside the
    min..max of `theirs`."""
    steps = []
    for step in theirs[0]:
        mean = sum(c[step][0] for c in ours) / len(ours)
        band = [c[step][0] for c in theirs]
        if label(step) >= BAND_FROM and not min(band) <= mean <= max(band):
            steps.append(step)
    return steps


def band_check(
    task: str,
    summary: dict[tuple[str, str], dict[int, tuple[float, ...]]],
    groups: dict[tuple[str, str], Curves],
) -> None:
    """Print each trainer's mean at 50k, 100k, 150k, where it crosses 0, and the band check."""
    band = summary.get((task, MLAGENTS))
    for (other_task, trainer), rows in summary.items():
        if other_task != task:
            continue
        means = {label(s) // 1000: stats[0] for s, stats in rows.items()}
        crossing = next((f"{k}k" for k, m in means.items() if m >= 0.0), "never")
        line = f"{task} {trainer}: mean reward " + ", ".join(
            f"{m:+.2f} at {k}k" for k, m in means.items() if k in (50, 100, 150)
        )
        line += f"; >= 0 from {crossing}"
        if band is not None and trainer != MLAGENTS:
            missed = [
                f"{label(s) // 1000}k ({rows[s][0]:+.3f} vs {band[s][1]:+.3f}..{band[s][2]:+.3f})"
                for s in outside(groups[task, trainer], groups[task, MLAGENTS])
            ]
            line += "; in mlagents-learn's band from 30k: " + (
                "yes, at every point" if not missed else "no, outside at " + ", ".join(missed)
            )
        print(line)


def welch_check(task: str, groups: dict[tuple[str, str], Curves]) -> None:
    """Print, per trainer, its largest difference of mean reward from mlagents-learn's at the
    points from 30k and the smallest p of Welch's t-test there (per point, uncorrected)."""
    from scipy.stats import ttest_ind

    band = groups.get((task, MLAGENTS))
    if band is None:
        return
    for (other_task, trainer), curves in groups.items():
        if other_task != task or trainer == MLAGENTS or len(curves) < 2 or len(band) < 2:
            continue
        tests = []
        for step in curves[0]:
            if label(step) >= BAND_FROM:
                ours, theirs = [c[step][0] for c in curves], [c[step][0] for c in band]
                p = float(ttest_ind(ours, theirs, equal_var=False).pvalue)
                tests.append((sum(ours) / len(ours) - sum(theirs) / len(theirs), p, label(step)))
        diff, _, at = max(tests, key=lambda t: abs(t[0]))
        _, p, weakest = min(tests, key=lambda t: t[1])
        print(
            f"{task} {trainer} ({len(curves)} seeds) against mlagents-learn ({len(band)}): "
            f"largest difference of means {diff:+.3f} at {at // 1000}k; smallest Welch p "
            f"{p:.2f} at {weakest // 1000}k"
        )


def band_odds(task: str, groups: dict[tuple[str, str], Curves], size: int = 5) -> None:
    """With 2 x `size` or more mlagents-learn seeds, print how often the band check of `size`
    seeds each passes for mlagents-learn against itself (every split of its seeds into two
    halves) and for each other trainer against it (every choice of `size` seeds of each)."""
    reference = groups.get((task, MLAGENTS), [])
    if len(reference) < 2 * size:
        return
    seeds = range(len(reference))
    halves = [(a, [i for i in seeds if i not in a]) for a in combinations(seeds, size)]
    alike = [not outside([reference[i] for i in a], [reference[i] for i in b]) for a, b in halves]
    line = (
        f"{task} band check of {size} seeds each: passes for {MLAGENTS} against itself in "
        f"{sum(alike) / len(alike):.0%} of the {len(alike)} splits of its {len(reference)} seeds"
    )
    picks = [[reference[i] for i in c] for c in combinations(seeds, size)]
    for (other_task, trainer), curves in groups.items():
        if other_task != task or trainer == MLAGENTS or len(curves) < size:
            continue
        ours = list(combinations(curves, size))
        hits = sum(not outside(o, theirs) for o in ours for theirs in picks)
        line += f"; for {trainer} against it in {hits / (len(ours) * len(picks)):.0%}"
        line += f" of the {len(ours) * len(picks)} choices of {size} seeds of each"
    print(line)


def plot(path: Path, task: str, summary: dict[str, dict[int, tuple[float, ...]]]) -> None:
    """Reward and success against steps: each trainer's mean and its min..max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for trainer, rows in summary.items():
        x = [label(s) / 1000 for s in rows]
        for axis, offset in zip(axes, (0, 3), strict=True):
            stats = list(rows.values())
            (line,) = axis.plot(x, [v[offset] for v in stats], label=trainer)
            low, high = [v[offset + 1] for v in stats], [v[offset + 2] for v in stats]
            axis.fill_between(x, low, high, alpha=0.2, color=line.get_color())
    for axis, name in zip(axes, ("mean reward", "success"), strict=True):
        axis.set_xlabel("agent steps (thousands; 10k = 10,240)")
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.suptitle(f"{task}: mean and min..max over seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


if __name__ == "__main__":
    main()
