"""meta-eval's plan: the options, runs, weights, baselines and tasks, checked before any work."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from pathlib import Path

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.registry import entry
from meta.config import Config, RuntimeConfig
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.runs import (
    JointBaseline,
    check_loads,
    check_other,
    check_same,
    joint_training,
    load_run,
)
from meta.evaluation.setting import Setting
from meta.evaluation.tasks import EvalTask, sample_tasks
from meta.run.directory import STATUS_FILE, RunError, check_inside, latest_weights
from meta.run.names import check_name
from meta.run.status import TrainingStatus
from meta.runtime.cluster import Cluster, join_or_start_ray

EVAL_DIR = "eval"


@dataclass
class RunStart:
    """One meta-training run to evaluate: its weights, its joint baselines, other learners."""

    run_id: str
    seed: int
    weights: Weights
    joints: list[JointBaseline]
    others: dict[str, Weights] = field(default_factory=dict)
    """Other meta-learners' weights on the same seed, by algorithm (e.g. fomaml)."""


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
        """The first run's first joint baseline."""
        return next(iter(self.runs[0].joints), None)


def plan_eval(cli: Config, run_id: str) -> EvalPlan:
    """Validate the options, the runs, their weights and baselines; write nothing."""
    cli.eval.validate()
    cli.runtime.validate()
    if cli.eval.search is not None and importlib.util.find_spec("optuna") is None:
        raise ValueError("eval.search needs Optuna: pip install 'meta-harness[search]'")
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
    if cli.eval.search is not None and cli.eval.search.run_first:
        cli.eval.search.run_procedure(run.ppo)
    setting = Setting(run, cli.eval, cli.seed, cli.torch_device)
    labels = [setting.label(a) for a in cli.eval.adaptation]
    if len(set(labels)) != len(labels):
        raise ValueError(f"eval.adaptation lists a procedure twice: {labels}")
    parameters = parse_environment_parameters(run.environment_parameters, [BEHAVIOR_NAME])
    status_path = Path(cli.results_dir) / ids[0] / STATUS_FILE
    if status_path.is_file():
        status = TrainingStatus.load(status_path)
        parameters.set_lesson_nums({n: status.lesson_num(n) for n in parameters.lesson_nums()})
    tasks = sample_tasks(setting, parameters)
    for job in (job for jobs in tasks.values() for job in jobs):
        envs.family(job.task.family).validate(job.task.params)
    runs = [_run_start(cli, i, cfg) for i, cfg in configs]
    _add_others(cli, configs, runs)
    out = cli.eval.out_dir or (
        str(Path(cli.results_dir) / ids[0] / EVAL_DIR)
        if len(ids) == 1
        else str(Path(cli.results_dir) / f"{EVAL_DIR}_{'+'.join(ids)}")
    )
    cluster = join_or_start_ray(cli.runtime) if cli.runtime.backend == "ray" else None
    return EvalPlan(setting, runs, tasks, Path(out), cli.runtime, cluster)


def _run_start(cli: Config, run_id: str, run: Config) -> RunStart:
    """A run's weights (checked to fit) and its joint baselines."""
    weights = latest_weights(cli.results_dir, run_id)
    check_loads(run, weights, f"run {run_id!r}")
    joints = []
    if cli.eval.joint_run_id:
        joint = JointBaseline(cli.results_dir, cli.eval.joint_run_id)
        if not (Path(cli.results_dir) / joint.run_id).is_dir():
            raise RunError(
                f"eval.joint_run_id: run {joint.run_id!r} does not exist in {cli.results_dir}"
            )
        joint_weights = latest_weights(cli.results_dir, cli.eval.joint_run_id)
        check_loads(run, joint_weights, f"eval.joint_run_id={cli.eval.joint_run_id!r}")
        joints = [joint]
    if entry(run.meta.algorithm).joint_baseline:
        joints = []  # the run is itself the joint baseline
    elif not joints:
        eval_dir = Path(cli.results_dir) / run_id / EVAL_DIR
        # trained at meta-eval's matmul precision, as its adaptations are
        mine = replace(run, torch_matmul_precision=cli.torch_matmul_precision)
        joints = [joint_training(mine, eval_dir, settings) for settings in cli.eval.joint_ppo]
        names = [j.run_id for j in joints]
        if len(set(names)) != len(names):
            raise ValueError(f"eval.joint_ppo: two entries train the same baseline ({names})")
    return RunStart(run_id, run.seed, weights, joints)


def _add_others(cli: Config, configs: list[tuple[str, Config]], runs: list[RunStart]) -> None:
    """Other meta-learners' runs (eval.other_run_ids), each paired with the run of its seed."""
    by_seed = {run.seed: run for run in runs}
    for other_id in cli.eval.other_run_ids:
        _, other = load_run(cli.results_dir, other_id)
        check_other(configs[0], (other_id, other))
        run = by_seed.get(other.seed)
        if run is None:
            raise ValueError(
                f"eval.other_run_ids: run {other_id!r} has seed {other.seed}, which no run of "
                f"eval.run_ids has ({sorted(by_seed)})"
            )
        if other.meta.algorithm in run.others:
            raise ValueError(
                f"eval.other_run_ids: two {other.meta.algorithm} runs have seed {other.seed}"
            )
        weights = latest_weights(cli.results_dir, other_id)
        check_loads(other, weights, f"run {other_id!r}")
        run.others[other.meta.algorithm] = weights
    methods = [set(run.others) for run in runs]
    if any(m != methods[0] for m in methods):
        raise ValueError("eval.other_run_ids must give every meta-learner for every seed")
