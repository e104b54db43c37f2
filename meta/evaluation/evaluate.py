"""meta-eval: does the meta-learned start adapt faster than a random or a joint multi-task one?

For held-out tasks (each family's `test` ranges) and fresh `train` tasks, inner PPO adapts
from (a) the run's weights, (b) a random init (scratch) and (c) a `joint` baseline's weights
(trained here on the run's configuration when not given), and each start is measured after
every budget of updates. Several meta-training runs (seeds) can be evaluated together, each
with its own joint baseline; the intervals then resample the meta-training seeds too.
Results go to <run>/eval/ (or eval.out_dir): adaptation.csv, summary.csv (pooled),
summary_per_seed.csv, steps_to_80.csv and adaptation.png.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

import envs
from envs.constants import BEHAVIOR_NAME, SPLITS
from meta.config import Config, RuntimeConfig
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.adapt import AdaptJob, EvalTask, Setting, Weights, adapt_job, sample_tasks
from meta.evaluation.config import EvalConfig
from meta.evaluation.executor import Executor, SequentialExecutor, make_executor
from meta.evaluation.plot import plot
from meta.evaluation.runs import (
    JOINT_RUN,
    JointBaseline,
    check_loads,
    check_same,
    joint_training,
    joint_weights,
    load_run,
)
from meta.evaluation.statistics import Cell, Measurement, steps_to_target, summarise
from meta.run.atomic import atomic_write_text
from meta.run.directory import STATUS_FILE, RunError, check_inside, latest_weights
from meta.run.names import check_name
from meta.run.status import TrainingStatus
from meta.runtime.cluster import Cluster, join_or_start_ray

log = logging.getLogger(__name__)
EVAL_DIR = "eval"
__all__ = ["JOINT_RUN", "EvalConfig", "EvalPlan", "JointBaseline", "evaluate", "plan"]


@dataclass
class RunStart:
    """One meta-training run to evaluate: its weights and its joint baseline."""

    run_id: str
    seed: int
    weights: Weights
    joint: JointBaseline | None


@dataclass
class EvalPlan:
    """Everything checked before any work: the runs, their weights and baselines, the tasks."""

    setting: Setting
    runs: list[RunStart]
    tasks: dict[tuple[str, str], list[EvalTask]]
    """Tasks per (family, split), the same for every run."""
    out_dir: Path
    """Where the results go."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """Where the adaptation jobs run (the meta-eval command's `runtime`)."""
    cluster: Cluster | None = None
    """The Ray connection (runtime=ray), made before anything is written."""

    @property
    def run_id(self) -> str:
        """The first run's id."""
        return self.runs[0].run_id

    @property
    def weights(self) -> Weights:
        """The first run's weights."""
        return self.runs[0].weights

    @property
    def joint(self) -> JointBaseline | None:
        """The first run's joint baseline."""
        return self.runs[0].joint


def check_eval(ev: EvalConfig) -> None:
    """Raise ValueError naming the first invalid eval.* field."""
    if not ev.budgets:
        raise ValueError("eval.budgets is empty: give adaptation budgets in PPO updates")
    if any(b < 0 for b in ev.budgets):
        raise ValueError(f"eval.budgets must be >= 0, got {list(ev.budgets)}")
    for name in (
        "seeds",
        "tasks_per_family",
        "buffer_size",
        "eval_episodes",
        "bootstrap_samples",
        "workers",
    ):
        if getattr(ev, name) <= 0:
            raise ValueError(f"eval.{name} must be > 0, got {getattr(ev, name)}")
    if not ev.splits or any(s not in SPLITS for s in ev.splits):
        raise ValueError(f"eval.splits must name splits among {SPLITS}, got {list(ev.splits)}")
    if not 0.0 < ev.confidence < 1.0:
        raise ValueError(f"eval.confidence must be in (0, 1), got {ev.confidence}")
    if not 0.0 < ev.threshold <= 1.0:
        raise ValueError(f"eval.threshold must be in (0, 1], got {ev.threshold}")
    if not 0.0 < ev.success_target <= 1.0:
        raise ValueError(f"eval.success_target must be in (0, 1], got {ev.success_target}")
    if len(set(ev.run_ids)) != len(ev.run_ids):
        raise ValueError(f"eval.run_ids names a run twice: {list(ev.run_ids)}")


def plan(cli: Config, run_id: str) -> EvalPlan:
    """Validate the options, the runs, their weights and baselines; write nothing."""
    check_eval(cli.eval)
    cli.runtime.validate()
    ids = list(cli.eval.run_ids) or ([run_id] if run_id else [])
    if not ids:
        raise ValueError("run_id is required: meta-eval run_id=<run to evaluate>")
    if run_id and cli.eval.run_ids and run_id not in ids:
        raise ValueError(f"run_id={run_id!r} is not among eval.run_ids={ids}")
    for i in ids:
        check_name(i, "eval.run_ids" if cli.eval.run_ids else "run_id")
        check_inside(Path(cli.results_dir) / i)  # its eval/ is written
    if cli.eval.joint_run_id:
        check_name(cli.eval.joint_run_id, "eval.joint_run_id")
    if len(ids) > 1 and cli.eval.joint_run_id:
        raise ValueError(
            "eval.joint_run_id names one baseline; with several eval.run_ids each run's own "
            "joint baseline is trained (or reused) in <run>/eval/joint"
        )
    configs = [load_run(cli.results_dir, i) for i in ids]
    check_same(configs)
    run = configs[0][1]
    setting = Setting(run, cli.eval, cli.seed, cli.torch_device)
    parameters = parse_environment_parameters(run.environment_parameters, [BEHAVIOR_NAME])
    status_path = Path(cli.results_dir) / ids[0] / STATUS_FILE
    if status_path.is_file():
        status = TrainingStatus.load(status_path)
        parameters.set_lesson_nums({n: status.lesson_num(n) for n in parameters.lesson_nums()})
    tasks = sample_tasks(setting, parameters)
    for job in (job for jobs in tasks.values() for job in jobs):
        envs.family(job.task.family).validate(job.task.params)
    runs = [_run_start(cli, i, cfg) for i, cfg in configs]
    out = cli.eval.out_dir or (
        str(Path(cli.results_dir) / ids[0] / EVAL_DIR)
        if len(ids) == 1
        else str(Path(cli.results_dir) / f"{EVAL_DIR}_{'+'.join(ids)}")
    )
    cluster = join_or_start_ray(cli.runtime) if cli.runtime.backend == "ray" else None
    return EvalPlan(setting, runs, tasks, Path(out), cli.runtime, cluster)


def _run_start(cli: Config, run_id: str, run: Config) -> RunStart:
    """A run's weights (checked to fit) and its joint baseline."""
    weights = latest_weights(cli.results_dir, run_id)
    check_loads(run, weights, f"run {run_id!r}")
    joint = None
    if cli.eval.joint_run_id:
        joint = JointBaseline(cli.results_dir, cli.eval.joint_run_id)
        if not (Path(cli.results_dir) / joint.run_id).is_dir():
            raise RunError(
                f"eval.joint_run_id: run {joint.run_id!r} does not exist in {cli.results_dir}"
            )
        joint_weights = latest_weights(cli.results_dir, cli.eval.joint_run_id)
        check_loads(run, joint_weights, f"eval.joint_run_id={cli.eval.joint_run_id!r}")
    if run.meta.algorithm == JOINT_RUN:
        joint = None  # the run is itself the joint baseline
    elif joint is None:
        joint = joint_training(run, Path(cli.results_dir) / run_id / EVAL_DIR)
    return RunStart(run_id, run.seed, weights, joint)


def _bar(enabled: bool) -> Progress:
    return Progress(
        TextColumn("meta-eval {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        disable=not enabled,
    )


def _jobs(p: EvalPlan, executor: Executor, say: Callable[[str], None]) -> list[AdaptJob]:
    """Every adaptation: runs x tasks x starts x seeds (baselines trained first, in parallel)."""
    ev, method = p.setting.eval, p.setting.run.meta.algorithm
    # joint baselines write run directories: on Ray they train here, on the driver
    trainer = SequentialExecutor() if p.runtime.backend == "ray" else executor
    joints = joint_weights([r.joint for r in p.runs], trainer, say)
    jobs = []
    for index, (start, joint) in enumerate(zip(p.runs, joints, strict=True)):
        starts: dict[str, Weights | None] = {method: start.weights, "scratch": None}
        if joint is not None:
            starts[JOINT_RUN] = joint
        for tasks in p.tasks.values():
            for task in tasks:
                for name, weights in starts.items():
                    for seed in range(ev.seeds):
                        # adaptation seeds differ across runs: scratch is not repeated
                        global_seed = index * ev.seeds + seed
                        jobs.append(
                            AdaptJob(
                                p.setting,
                                task,
                                name,
                                weights,
                                global_seed,
                                start.seed,
                                reference=start.weights,
                            )
                        )
    return jobs


def evaluate(p: EvalPlan, progress: bool = False, executor: Executor | None = None) -> list[Cell]:
    """Adapt every start on every task and seed, write the outputs, return the pooled summary."""
    ev = p.setting.eval
    own = executor is None
    executor = executor or make_executor(ev.workers, p.runtime)
    measurements: list[Measurement] = []
    try:
        jobs = _jobs(p, executor, print if progress else log.info)
        with _bar(progress) as bar:
            task = bar.add_task(f"{len(p.runs)} run(s)", total=len(jobs))
            for rows in executor.map(adapt_job, jobs):
                measurements += rows
                bar.advance(task)
    finally:
        if own:
            executor.close()
        if p.cluster is not None:
            p.cluster.close()
    options = {"seed": p.setting.seed, "samples": ev.bootstrap_samples}
    cells = summarise(measurements, **options, confidence=ev.confidence, threshold=ev.threshold)
    per_seed = [
        cell
        for run in p.runs
        for cell in summarise(
            [m for m in measurements if m.meta_seed == run.seed],
            **options,
            confidence=ev.confidence,
            threshold=ev.threshold,
        )
    ]
    steps = steps_to_target(measurements, ev.success_target, **options, confidence=ev.confidence)
    write_csv(p.out_dir / "adaptation.csv", measurements)
    write_csv(p.out_dir / "summary.csv", cells)
    write_csv(p.out_dir / "summary_per_seed.csv", per_seed)
    write_csv(p.out_dir / "steps_to_80.csv", steps)
    plot(cells, p.out_dir / "adaptation.png", ev.confidence, per_seed)
    return cells


def write_csv(path: Path, rows: Sequence[Any]) -> None:
    """Dataclass rows as CSV, atomically (NaN as an empty cell)."""
    if not rows:
        raise ValueError(f"nothing to write to {path}")
    names = [f.name for f in fields(rows[0])]
    text = io.StringIO()
    writer = csv.DictWriter(text, names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in asdict(row).items()})
    atomic_write_text(path, text.getvalue())


def _cell(value: Any) -> Any:
    return "" if isinstance(value, float) and value != value else value
