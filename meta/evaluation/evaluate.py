"""meta-eval: does the meta-learned start adapt faster than a random or a joint multi-task one?

For held-out tasks (each family's `test` ranges) and fresh `train` tasks, inner PPO adapts
from (a) the run's weights, (b) a random init (scratch) and (c) a `joint` baseline's weights
(trained here on the run's configuration when not given), and each start is measured after
every budget of updates. Results go to <run>/eval/: adaptation.csv, summary.csv, adaptation.png.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
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
from meta.algorithm.ppo.train import policy_for
from meta.config import Config
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.adapt import EvalTask, Setting, Weights, adapt, sample_tasks
from meta.evaluation.config import EvalConfig
from meta.evaluation.plot import plot
from meta.evaluation.statistics import Cell, Measurement, summarise
from meta.run.atomic import atomic_write_text
from meta.run.directory import CONFIG_FILE, STATUS_FILE, RunError, latest_weights
from meta.run.status import TrainingStatus
from meta.runtime.envpool import EnvPool

log = logging.getLogger(__name__)
EVAL_DIR, JOINT_RUN = "eval", "joint"
MATCHED = ("seed", "meta", "ppo", "network", "env", "environment_parameters")


@dataclass
class JointBaseline:
    """Where the joint baseline's weights come from, or how meta-eval trains them."""

    results_dir: str
    run_id: str
    train: Config | None = None
    """The joint run's configuration when it still has to be trained (or resumed)."""


@dataclass
class EvalPlan:
    """Everything checked before any work: the run, its weights and the baseline."""

    setting: Setting
    run_id: str
    run_dir: Path
    weights: Weights
    joint: JointBaseline | None
    tasks: dict[tuple[str, str], list[EvalTask]]
    """Tasks per (family, split)."""

    @property
    def out_dir(self) -> Path:
        """<run>/eval."""
        return self.run_dir / EVAL_DIR


def check_eval(ev: EvalConfig) -> None:
    """Raise ValueError naming the first invalid eval.* field."""
    if not ev.budgets:
        raise ValueError("eval.budgets is empty: give adaptation budgets in PPO updates")
    if any(b < 0 for b in ev.budgets):
        raise ValueError(f"eval.budgets must be >= 0, got {list(ev.budgets)}")
    for name in ("seeds", "tasks_per_family", "buffer_size", "eval_episodes", "bootstrap_samples"):
        if getattr(ev, name) <= 0:
            raise ValueError(f"eval.{name} must be > 0, got {getattr(ev, name)}")
    if not ev.splits or any(s not in SPLITS for s in ev.splits):
        raise ValueError(f"eval.splits must name splits among {SPLITS}, got {list(ev.splits)}")
    if not 0.0 < ev.confidence < 1.0:
        raise ValueError(f"eval.confidence must be in (0, 1), got {ev.confidence}")
    if not 0.0 < ev.threshold <= 1.0:
        raise ValueError(f"eval.threshold must be in (0, 1], got {ev.threshold}")


def run_config(run_dir: Path, results_dir: str) -> Config:
    """The run's own configuration.yaml as a Config (its eval section left to meta-eval)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise RunError(f"{path} is missing: not a meta-train run directory")
    raw = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(raw, dict)
    for key in ("eval", "run_id"):
        raw.pop(key, None)
    merged = OmegaConf.merge(OmegaConf.structured(Config), raw)
    cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    return replace(cfg, results_dir=results_dir, resume=False, force=False)


def plan(cli: Config, run_id: str) -> EvalPlan:
    """Validate the options, the run, its weights and the baseline; write nothing."""
    check_eval(cli.eval)
    if not run_id:
        raise ValueError("run_id is required: meta-eval run_id=<run to evaluate>")
    run_dir = Path(cli.results_dir) / run_id
    if not run_dir.is_dir():
        raise RunError(f"run {run_id!r} does not exist in {cli.results_dir}")
    run = run_config(run_dir, cli.results_dir)
    weights = latest_weights(cli.results_dir, run_id)
    _check_loads(run, weights, f"run {run_id!r}")
    setting = Setting(run, cli.eval, cli.seed, cli.torch_device)
    parameters = parse_environment_parameters(run.environment_parameters, [BEHAVIOR_NAME])
    status_path = run_dir / STATUS_FILE
    if status_path.is_file():
        status = TrainingStatus.load(status_path)
        parameters.set_lesson_nums({n: status.lesson_num(n) for n in parameters.lesson_nums()})
        done = int(status.get(BEHAVIOR_NAME, "meta_step", run.meta.steps))
        if done < run.meta.steps:
            log.warning("run %s stopped at meta-step %d of %d", run_id, done, run.meta.steps)
    tasks = sample_tasks(setting, parameters)
    for job in (job for jobs in tasks.values() for job in jobs):
        envs.family(job.task.family).validate(job.task.params)
    joint = None
    if cli.eval.joint_run_id:
        joint = JointBaseline(cli.results_dir, cli.eval.joint_run_id)
        if not (Path(cli.results_dir) / joint.run_id).is_dir():
            raise RunError(
                f"eval.joint_run_id: run {joint.run_id!r} does not exist in {cli.results_dir}"
            )
        joint_weights = latest_weights(cli.results_dir, cli.eval.joint_run_id)
        _check_loads(run, joint_weights, f"eval.joint_run_id={cli.eval.joint_run_id!r}")
    if run.meta.algorithm == JOINT_RUN:
        joint = None  # the run is itself the joint baseline
    elif joint is None:
        joint = _joint_training(run, run_dir / EVAL_DIR)
    return EvalPlan(setting, run_id, run_dir, weights, joint, tasks)


def _check_loads(run: Config, weights: Weights, what: str) -> None:
    """Fail early when weights do not fit the run's network."""
    env = envs.make(run.meta.tasks[0].name)
    try:
        policy_for(env, run.network).load_state_dict(weights)
    except RuntimeError as error:
        raise RunError(f"{what}: weights do not fit the run's network") from error
    finally:
        env.close()


def _joint_training(run: Config, eval_dir: Path) -> JointBaseline:
    """The joint run meta-eval trains: the run's config with meta.algorithm=joint."""
    from meta.trainer import plan as train_plan

    cfg = replace(
        run,
        meta=replace(run.meta, algorithm=JOINT_RUN),
        results_dir=str(eval_dir),
        initialize_from=None,
        eval=EvalConfig(),
    )
    joint_dir = eval_dir / JOINT_RUN
    same = _same_config(joint_dir, cfg)
    if same and (joint_dir / f"{BEHAVIOR_NAME}.pt").is_file():
        log.info("reusing the joint baseline in %s", joint_dir)
        return JointBaseline(str(eval_dir), JOINT_RUN)
    if same and (joint_dir / BEHAVIOR_NAME / "checkpoint.pt").is_file():
        cfg = replace(cfg, resume=True)
    elif joint_dir.exists():
        cfg = replace(cfg, force=True)
    train_plan(cfg, JOINT_RUN)
    return JointBaseline(str(eval_dir), JOINT_RUN, cfg)


def _same_config(joint_dir: Path, cfg: Config) -> bool:
    """Whether an existing joint run was trained with this configuration."""
    path = joint_dir / CONFIG_FILE
    if not path.is_file():
        return False
    saved = OmegaConf.to_container(OmegaConf.load(path))
    expected = asdict(cfg)
    return isinstance(saved, dict) and all(saved.get(k) == expected[k] for k in MATCHED)


def joint_weights(joint: JointBaseline, say: Callable[[str], None]) -> Weights:
    """The baseline's weights, training it first when needed."""
    if joint.train is not None:
        from meta.trainer import train

        run_dir = Path(joint.results_dir) / joint.run_id
        say(f"meta-eval: training the joint baseline (meta.algorithm=joint) in {run_dir}")
        train(joint.train, joint.run_id)
    return latest_weights(joint.results_dir, joint.run_id)


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


def evaluate(p: EvalPlan, progress: bool = False) -> list[Cell]:
    """Adapt every start on every task and seed, write the outputs, return the summary."""
    ev, run = p.setting.eval, p.setting.run
    starts: dict[str, Weights | None] = {run.meta.algorithm: p.weights, "scratch": None}
    if p.joint is not None:
        starts[JOINT_RUN] = joint_weights(p.joint, print if progress else log.info)
    pool = EnvPool(run.env)
    measurements: list[Measurement] = []
    total = sum(map(len, p.tasks.values())) * len(starts) * ev.seeds
    try:
        with _bar(progress) as bar:
            jobs = bar.add_task("", total=total)
            for (family, split), tasks in p.tasks.items():
                for job in tasks:
                    bar.update(jobs, description=f"{family} {split} task {job.index}")
                    for method, start in starts.items():
                        for seed in range(ev.seeds):
                            measurements += adapt(pool, p.setting, job, method, start, seed)
                            bar.advance(jobs)
    finally:
        pool.close()
    cells = summarise(
        measurements,
        seed=p.setting.seed,
        samples=ev.bootstrap_samples,
        confidence=ev.confidence,
        threshold=ev.threshold,
    )
    write_csv(p.out_dir / "adaptation.csv", measurements)
    write_csv(p.out_dir / "summary.csv", cells)
    plot(cells, p.out_dir / "adaptation.png", ev.confidence)
    return cells


def write_csv(path: Path, rows: Sequence[Measurement] | Sequence[Cell]) -> None:
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
