"""A search trial's objective: the run's own start adapted on training-distribution tasks.

meta-eval's adaptation jobs and statistics, for the run's start alone (no scratch or joint
baseline: they do not depend on the trial's settings), on `eval.splits` (checked never to hold
`test`). The measurements and the value go to `<run>/search/` (adaptation.csv,
objective.json); meta-report reads the value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from meta.config import Config
from meta.config.metric import STEPS, parse_metric
from meta.evaluation.adapt import AdaptJob, adaptations
from meta.evaluation.evaluate import plan_eval
from meta.evaluation.outputs import write_csv
from meta.evaluation.plan import EvalPlan
from meta.evaluation.statistics import Measurement, summarise
from meta.evaluation.steps import steps_to_target
from meta.process.atomic import atomic_write_text
from meta.runtime.executor import make_executor

POOLED_FAMILY = "all"
OBJECTIVE_FILE = "search/objective.json"
"""Where a trial records its objective, in its run directory (meta-report reads it)."""


def pooled_families(measurements: Sequence[Measurement]) -> list[Measurement]:
    """One family for all: each (family, split, task) its own task, so strata stay apart."""
    index: dict[tuple[str, str, int], int] = {}
    return [
        replace(
            m, family=POOLED_FAMILY, task=index.setdefault((m.family, m.split, m.task), len(index))
        )
        for m in measurements
    ]


def measure_objective(config: Config, run_dir: Path) -> float | None:
    """The trial's `optimized_metric` (None when the run has none); written beside the run."""
    (value,) = measure_objectives([(config, run_dir)])
    if isinstance(value, Exception):
        raise value
    return value


def measure_objectives(
    trials: Sequence[tuple[Config, Path]],
) -> list[float | Exception | None]:
    """Each trial's `optimized_metric` (None: it has none; an Exception: its measurement
    failed), every trial's adaptations run as one call of the first's executor, so that those
    of trials that share their settings adapt as one stack; written beside each run.

    A member's adaptation has the same bits in any stack of two or more, so each value is the
    one its trial measures alone where the trial adapts two or more times. Trials of a batch
    share their environments and runtime (a search's groups do); should the shared call fail,
    each trial is measured alone, so that a failure stays its own trial's.
    """
    out: list[float | Exception | None] = [None] * len(trials)
    planned: list[tuple[int, EvalPlan, list[AdaptJob]]] = []
    for n, (config, run_dir) in enumerate(trials):
        if not config.optimized_metric:
            continue
        try:
            checked = _checked(config, run_dir)
        except Exception as error:  # the trial's own input: the others are measured
            out[n] = error
            continue
        planned.append((n, checked, _jobs(config, checked)))
    if not planned:
        return out
    try:
        return _measured(trials, planned, out)
    finally:
        for _, checked, _ in planned:
            if checked.cluster is not None:
                checked.cluster.close()


def _measured(
    trials: Sequence[tuple[Config, Path]],
    planned: list[tuple[int, EvalPlan, list[AdaptJob]]],
    out: list[float | Exception | None],
) -> list[float | Exception | None]:
    """`out` with every planned trial's objective: all adapted in one call, or, should that
    fail, each alone."""
    try:
        every = [job for _, _, jobs in planned for job in jobs]
        rows = _adapted(every, planned[0][1], trials[planned[0][0]][0].eval.workers)
    except Exception:
        if len(planned) == 1:
            raise
        for n, checked, jobs in planned:
            try:
                measured = _adapted(jobs, checked, trials[n][0].eval.workers)
                out[n] = _recorded(*trials[n], [m for rows in measured for m in rows])
            except Exception as error:
                out[n] = error
        return out
    for n, _, jobs in planned:
        taken, rows = rows[: len(jobs)], rows[len(jobs) :]
        out[n] = _recorded(*trials[n], [m for measured in taken for m in measured])
    return out


def _checked(config: Config, run_dir: Path) -> EvalPlan:
    """The trial's meta-eval plan: its own start on `eval.splits`, no baselines."""
    ev = replace(config.eval, run_ids=[], joint_run_id=None, out_dir=None)
    return plan_eval(replace(config, eval=ev), run_dir.name)


def _jobs(config: Config, checked: EvalPlan) -> list[AdaptJob]:
    """The adaptations of the run's start: every task of every split, every seed."""
    start = checked.runs[0]
    return [
        AdaptJob(
            checked.setting,
            task,
            config.meta.algorithm,
            start.weights,
            seed,
            start.seed,
            reference=start.weights,
        )
        for tasks in checked.tasks.values()
        for task in tasks
        for seed in range(config.eval.seeds)
    ]


def _adapted(jobs: list[AdaptJob], checked: EvalPlan, workers: int) -> list[list[Measurement]]:
    """Each job's measurements, run on `checked`'s runtime with `workers` processes."""
    executor = make_executor(checked.runtime, checked.setting.run.env, workers)
    try:
        return list(adaptations(executor, jobs))
    finally:
        executor.close()


def _recorded(config: Config, run_dir: Path, measurements: list[Measurement]) -> float:
    """The objective of the trial's measurements, written with them beside its run."""
    ev = config.eval
    value = objective_value(
        measurements, str(config.optimized_metric), ev.budgets, ev.bootstrap_samples, ev.reach
    )
    write_csv((run_dir / OBJECTIVE_FILE).with_name("adaptation.csv"), measurements)
    record = {"optimized_metric": config.optimized_metric, "value": value, "splits": ev.splits}
    atomic_write_text(run_dir / OBJECTIVE_FILE, json.dumps(record, indent=2) + "\n")
    return value


def objective_value(
    measurements: list[Measurement],
    name: str,
    budgets: list[int],
    samples: int = 2000,
    reach: str = "first",
) -> float:
    """The metric `name` over `measurements` (families and splits pooled); steps-to-80 as
    `reach` (eval.reach) reads the curve."""
    metric, budget = parse_metric(name, budgets)
    pooled = [replace(m, split="objective") for m in pooled_families(measurements)]
    if metric == STEPS:
        (reached,) = steps_to_target(pooled, 0.8, samples=samples, reach=reach)
        if math.isfinite(reached.steps_to_80):
            return -reached.steps_to_80
        largest = max(pooled, key=lambda m: m.env_steps)
        per_update = largest.env_steps / max(largest.budget, 1)
        return -(largest.env_steps + per_update)
    (cell,) = [c for c in summarise(pooled, samples=samples) if c.budget == budget]
    return cell.success_iqm if metric == "success_iqm" else cell.reward_iqm
