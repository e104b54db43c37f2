"""meta-eval: does the meta-learned start adapt faster than a random or a joint multi-task one?

Each start (the run's weights, other meta-learners' runs, a random init: scratch, and the
`joint` baselines, trained here with each eval.joint_ppo setting when not given) first adapts
with every procedure of eval.adaptation on the selection split (tasks of the training
distribution); per start and family the procedure (and joint pretraining) that reaches the
success target in the fewest env steps is selected (meta.evaluation.selection). Then every
start adapts on the other splits, held-out `test` tasks among them, with its own selection
alone, and is measured after every budget of updates. Several meta-training runs (seeds) can be
evaluated together, each with its own baselines; the intervals then resample them too.
Results go to <run>/eval/ (or eval.out_dir): selection.csv, selection_adaptation.csv,
adaptation.csv, summary.csv (pooled), summary_per_seed.csv, steps_to_80.csv (with success AUC),
improvement.csv (rliable's probability of improvement over each baseline), adaptation.png.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from rich.console import Console

from meta.algorithm.ppo.weights import Weights
from meta.config.evaluation import EvalConfig, Procedure
from meta.evaluation.adapt import AdaptJob, adaptations
from meta.evaluation.outputs import write_outputs
from meta.evaluation.plan import EVAL_DIR, EvalPlan, plan_eval
from meta.evaluation.pretraining import joint_weights
from meta.evaluation.progress import (
    ADAPTATION,
    CHOICE,
    PRETRAINING,
    SELECTION,
    STATISTICS,
    STATISTICS_STEPS,
    EvalProgress,
)
from meta.evaluation.runs import JOINT_RUN, JointBaseline
from meta.evaluation.selection import SelectionRow, chosen, select
from meta.evaluation.statistics import Cell, Measurement
from meta.process.signals import Terminated
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import Executor, LocalExecutor, make_executor, stop_workers

log = logging.getLogger(__name__)
Start = tuple[str, str, "Weights | None"]
"""(method, pretraining, weights): one start of one run; None weights: scratch."""
__all__ = [
    "EVAL_DIR",
    "JOINT_RUN",
    "EvalConfig",
    "EvalPlan",
    "JointBaseline",
    "evaluate",
    "plan_eval",
]


def _starts(p: EvalPlan, executor: Executor, bar: EvalProgress) -> list[list[Start]]:
    """Per run: every start as (method, pretraining, weights); baselines trained first."""
    # joint baselines write run directories: on Ray they train here, on the driver
    trainer = LocalExecutor(EnvPool(p.setting.run.env)) if p.runtime.backend == "ray" else executor
    flat = [j for r in p.runs for j in r.joints]
    bar.watch([j for j in flat if j.train is not None])
    weights = iter(joint_weights(flat, trainer, bar.say))
    bar.stop_watching()
    bar.done(PRETRAINING)
    return [
        [(m, pre, next(weights) if _baseline(m, w) else w) for m, pre, w in starts]
        for starts in _unweighted(p)
    ]


def _baseline(method: str, weights: Weights | None) -> bool:
    """Whether a start is a joint baseline still without its weights (a meta=joint run's own
    start is named joint too, and has them)."""
    return method == JOINT_RUN and weights is None


def _unweighted(p: EvalPlan) -> list[list[Start]]:
    """Per run: every start, the joint ones still without their weights."""
    method = p.setting.run.meta.algorithm
    out = []
    for run in p.runs:
        starts: list[Start] = [(method, "", run.weights)]
        starts += [(name, "", w) for name, w in sorted(run.others.items())]
        starts.append(("scratch", "", None))
        starts += [(JOINT_RUN, j.pretraining, None) for j in run.joints]
        out.append(starts)
    return out


def _phases(p: EvalPlan, others: Sequence[str]) -> list[tuple[str, str, int, str]]:
    """meta-eval's phases as (key, label, total, unit), in the order they run."""
    ev, starts = p.setting.eval, _unweighted(p)
    pending = [j for r in p.runs for j in r.joints if j.train is not None]
    steps = sum(j.train.meta.steps - j.committed for j in pending if j.train)
    first: dict[str, str] = {}  # one candidate per start and family is reported: count the first
    for run in starts:
        for name, pretraining, _ in run:
            first.setdefault(name, pretraining)
    trials = ev.adaptation if ev.search is None else [Procedure()] * ev.search.trials
    selection = _jobs(p, starts, [ev.selection_split], lambda *_: trials)
    reported = _jobs(p, starts, others, lambda _, m, pre: ev.adaptation[:1] * (first[m] == pre))
    phases = [(PRETRAINING, "joint pretraining", steps, "meta-steps")] if pending else []
    phases.append((SELECTION, f"selection ({ev.selection_split})", len(selection), "jobs"))
    phases.append((CHOICE, "choice of procedures", 1, "step"))
    if reported:
        phases.append((ADAPTATION, f"adaptation ({'+'.join(others)})", len(reported), "jobs"))
    return [*phases, (STATISTICS, "statistics, plots", len(STATISTICS_STEPS), "steps")]


def _jobs(
    p: EvalPlan,
    starts: list[list[Start]],
    splits: Sequence[str],
    procedures: Callable[[str, str, str], Sequence[Procedure]],
) -> list[AdaptJob]:
    """Adaptations of every run x split x task x start x procedure x seed.

    `procedures(family, method, pretraining)` names the procedures a start adapts with.
    """
    ev = p.setting.eval
    jobs = []
    for index, (run, run_starts) in enumerate(zip(p.runs, starts, strict=True)):
        for (_, split), tasks in p.tasks.items():
            if split not in splits:
                continue
            for task in tasks:
                for name, pretraining, weights in run_starts:
                    for procedure in procedures(task.task.family, name, pretraining):
                        for seed in range(ev.seeds):
                            jobs.append(
                                AdaptJob(
                                    p.setting,
                                    task,
                                    name,
                                    weights,
                                    # adaptation seeds differ across runs: scratch not repeated
                                    index * ev.seeds + seed,
                                    run.seed,
                                    reference=run.weights,
                                    procedure=procedure,
                                    pretraining=pretraining,
                                )
                            )
    return jobs


def _run_jobs(
    jobs: list[AdaptJob], executor: Executor, bar: EvalProgress, phase: str
) -> list[Measurement]:
    measurements: list[Measurement] = []
    bar.begin(phase, len(jobs))
    for rows in adaptations(executor, jobs):
        measurements += rows
        bar.advance(phase)
    return measurements


def evaluate(
    p: EvalPlan,
    progress: bool = False,
    executor: Executor | None = None,
    console: Console | None = None,
) -> list[Cell]:
    """Select each start's procedure, adapt every start on every task and seed, write it all.

    `progress` shows meta-eval's bar (meta.evaluation.progress) on `console` (stdout's).
    """
    ev = p.setting.eval
    own = executor is None
    executor = executor or make_executor(p.runtime, p.setting.run.env, ev.workers)
    others = [s for s in ev.splits if s != ev.selection_split]
    bar = EvalProgress(progress, console)
    bar.set_phases(_phases(p, others))  # before it shows: the first frame lists every phase
    with bar:
        try:
            measurements, tried, selection = _adapt(p, executor, bar, others)
        except (KeyboardInterrupt, Terminated):
            stop_workers(executor)
            raise
        finally:
            if own:
                executor.close()
            if p.cluster is not None:
                p.cluster.close()
        return write_outputs(p, measurements, tried, selection, bar)


def _adapt(
    p: EvalPlan, executor: Executor, bar: EvalProgress, others: Sequence[str]
) -> tuple[list[Measurement], list[Measurement], list[SelectionRow]]:
    """The reported measurements, the selection split's, and the selection made on them."""
    ev = p.setting.eval
    options = {"seed": p.setting.seed, "samples": ev.bootstrap_samples}
    starts = _starts(p, executor, bar)
    if ev.search is None:
        every = _jobs(p, starts, [ev.selection_split], lambda *_: ev.adaptation)
        tried = _run_jobs(every, executor, bar, SELECTION)
        bar.begin(CHOICE, 1)
        selection = select(tried, ev.selection_split, ev.success_target, **options, reach=ev.reach)
        by_label = {p.setting.label(a): a for a in ev.adaptation}
    else:
        tried, selection, by_label = _searched(p, starts, executor, bar)
    bar.advance(CHOICE)
    picked = chosen(selection)

    def selected(family: str, method: str, pretraining: str) -> list[Procedure]:
        best = picked[family, method]
        return [by_label[best[1]]] if best[0] == pretraining else []

    measurements = [m for m in tried if picked[m.family, m.method] == _key(m)]
    if ev.selection_split not in ev.splits:
        measurements = []
    measurements += _run_jobs(_jobs(p, starts, others, selected), executor, bar, ADAPTATION)
    return measurements, tried, selection


def _searched(
    p: EvalPlan, starts: list[list[Start]], executor: Executor, bar: EvalProgress
) -> tuple[list[Measurement], list[SelectionRow], dict[str, Procedure]]:
    """eval.search's trials on the selection split: measurements, rows, procedures by label."""
    from meta.evaluation.search import Search  # optuna: the [search] extra (checked by plan_eval)

    ev = p.setting.eval
    assert ev.search is not None
    split = ev.selection_split
    families = sorted({family for family, s in p.tasks if s == split})
    names = dict.fromkeys((name, pre) for run in starts for name, pre, _ in run)
    search = Search(p.setting, [(family, *name) for family in families for name in names])
    per_trial = len(_jobs(p, starts, [split], lambda *_: [Procedure()]))
    bar.begin(SELECTION, per_trial * ev.search.trials)
    for _ in range(ev.search.trials):
        new = search.ask()
        jobs = _jobs(p, starts, [split], _proposed(new))
        rows: list[Measurement] = []
        for done in adaptations(executor, jobs):
            rows += done
            bar.advance(SELECTION)
        bar.advance(SELECTION, per_trial * (len(search.keys) - len(new)) // len(search.keys))
        search.tell(rows)
    bar.done(SELECTION)
    bar.begin(CHOICE, 1)
    return search.measurements(), search.selection(), search.procedures


def _proposed(new: dict[tuple[str, str, str], Procedure]) -> Callable[..., list[Procedure]]:
    """_jobs' procedures of a search round: each start's new proposal, if it has one."""

    def procedures(family: str, method: str, pretraining: str) -> list[Procedure]:
        key = (family, method, pretraining)
        return [new[key]] if key in new else []

    return procedures


def _key(m: Measurement) -> tuple[str, str]:
    return m.pretraining, m.adaptation
