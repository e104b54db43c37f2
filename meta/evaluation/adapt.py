"""meta-eval's adaptations and their measurements: a start adapted by the inner PPO on a task,
then every budget's episodes (one job at a time or a stack's in lockstep), adaptation.csv's rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

import envs
from meta.algorithm.ppo.network import Policy, policy_with
from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.request import Task, TrainRequest, TrainResult
from meta.config.evaluation import Procedure
from meta.evaluation.episodes import (
    policy_actor,
    run_episodes,
    run_stacked_episodes,
    stacked_actor,
)
from meta.evaluation.games import GameScores, game_columns, measure_game
from meta.evaluation.setting import Setting
from meta.evaluation.statistics import Measurement
from meta.evaluation.tasks import EvalTask, derived_seed
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import Executor, retrying
from meta.runtime.jobs import run_request
from meta.runtime.slots import claimed_slot

_ADAPT = 0xADA7
RETRIES = 3
"""Lost workers (a Ray actor's process died) meta-eval retries in all before it gives up."""


@dataclass(frozen=True)
class AdaptJob:
    """One adaptation: a start on a task with an adaptation seed (picklable, self-contained)."""

    setting: Setting
    task: EvalTask
    method: str
    start: Weights | None
    """None: a fresh random init (scratch)."""
    seed: int
    meta_seed: int = 0
    """Seed of the meta-training run the start comes from (recorded, not used to adapt)."""
    reference: Weights | None = None
    """The run's meta-learned weights: the fixed opponent games are also measured against."""
    procedure: Procedure = field(default_factory=Procedure)
    """How the start adapts (optimizer, learning rate, update size)."""
    pretraining: str = ""
    """joint: the PPO settings its start was pretrained with (recorded)."""

    def request(self) -> TrainRequest:
        """The adaptation as a training request: the start's weights at every budget back."""
        setting, task, procedure = self.setting, self.task, self.procedure
        budgets = setting.budgets(procedure)
        return TrainRequest(
            tasks=(task.task,),
            weights=self.start,
            seed=derived_seed(
                setting.seed, task.split, task.task.family, task.index, self.seed, _ADAPT
            ),
            ppo=setting.ppo(procedure),
            network=setting.run.network,
            device=setting.device,
            updates=max(budgets),
            log_std=procedure.log_std,
            reset=tuple(procedure.reset),
            snapshots=tuple(budgets),
        )

    def training(self) -> TrainRequest:
        """The request (meta.runtime.jobs.TrainingJob)."""
        return self.request()

    def finish(self, pool: EnvPool, result: TrainResult) -> list[Measurement]:
        """The measurements of the trained result at every budget."""
        return measured(pool, self, result)

    @staticmethod
    def finish_together(
        pool: EnvPool, jobs: Sequence[AdaptJob], results: Sequence[TrainResult]
    ) -> list[list[Measurement]]:
        """Each job's `finish` of a stack's results, measured in lockstep (FinishedTogether)."""
        return measured_together(pool, jobs, results)

    def __call__(self, pool: EnvPool, timers: Timers) -> list[Measurement]:
        """The job's measurements, on environments of its own (meta.runtime.jobs.Job)."""
        return adapt_job(self)


def adaptations(executor: Executor, jobs: Sequence[AdaptJob]) -> Iterator[list[Measurement]]:
    """Every job's measurements on `executor`, in the jobs' order."""
    return executor.run(jobs, retrying(RETRIES))


def adapt_job(job: AdaptJob) -> list[Measurement]:
    """Run one job with environments of its own (the same in any process).

    On builds the job claims a block of ports no other job on the machine holds, so that jobs
    in parallel workers never launch on the same ports.
    """
    env = job.setting.run.env
    slot = claimed_slot(env.base_port) if env.backend == "unity" else nullcontext(0)
    with slot as claimed:
        pool = EnvPool(env, claimed)
        try:
            rows = adapt(pool, job)
        finally:
            pool.close()
    return rows


def adapt(pool: EnvPool, adapt_job: AdaptJob) -> list[Measurement]:
    """Adapt from the job's start (None: a fresh random init) and measure at every budget.

    A game of teams adapts with the ghost trainer and is measured by its win rates against
    a random policy and against the run's weights (meta.evaluation.games).
    """
    result = run_request(adapt_job.request(), pool, NullTimers())
    return measured(pool, adapt_job, result)


_MEASURE = 0xE7A1


def measured(pool: EnvPool, adapt_job: AdaptJob, result: TrainResult) -> list[Measurement]:
    """The rows of an adaptation's result: its start's episodes after every budget."""
    setting, task = adapt_job.setting, adapt_job.task.task
    ev = setting.eval
    game = envs.family(task.family).adversarial
    policy = policy_with(result.weights, setting.run.network).to(setting.device)
    seed = measure_seed(adapt_job)
    rows = []
    for budget, weights in sorted(result.snapshots.items()):
        policy.load_state_dict(weights)
        if game:
            scores = measure_game(
                pool,
                task,
                policy,
                adapt_job.reference,
                setting.run.network,
                ev.eval_episodes,
                seed,
                ev.deterministic,
            )
            measure_ = (scores.mean_reward, scores.success, scores.games)
            rows.append(_row(adapt_job, result, budget, measure_, scores))
        else:
            rows.append(_row(adapt_job, result, budget, measure(pool, setting, task, policy, seed)))
    return rows


def measured_together(
    pool: EnvPool, jobs: Sequence[AdaptJob], results: Sequence[TrainResult]
) -> list[list[Measurement]]:
    """Every job's rows, as `measured` gives them, the episodes of every job's budgets run in
    lockstep (one core per family, one stacked policy): a game, a build or a single budget to
    measure is measured as `measured` does."""
    members = [
        (i, budget)
        for i, (job, result) in enumerate(zip(jobs, results, strict=True))
        if not envs.family(job.task.task.family).adversarial
        for budget in sorted(result.snapshots)
    ]
    if len(members) < 2 or pool.cfg.backend != "native":  # member i on its own builds
        return [
            measured(pool.for_member(i), job, r)
            for i, (job, r) in enumerate(zip(jobs, results, strict=True))
        ]
    setting, ev = jobs[0].setting, jobs[0].setting.eval
    families: dict[str, list[tuple[int, int]]] = {}
    for i, budget in members:
        families.setdefault(jobs[i].task.task.family, []).append((i, budget))
    scores: dict[tuple[int, int], tuple[float, float, int]] = {}
    for family in families.values():
        tasks = [jobs[i].task.task for i, _ in family]
        seeds = [measure_seed(jobs[i]) for i, _ in family]
        act = stacked_actor(
            [results[i].snapshots[b] for i, b in family],
            setting.run.network,
            setting.device,
            ev.deterministic,
            [torch.Generator().manual_seed(s) for s in seeds],
        )
        made = [
            pool.env(t.family, t.params, s, ev.eval_episodes)
            for t, s in zip(tasks, seeds, strict=True)
        ]
        try:
            found = run_stacked_episodes(made, act, ev.eval_episodes)  # type: ignore[arg-type]
        finally:
            for env in made:
                pool.release(env)
        scores.update(zip(family, found, strict=True))
    out = []
    for i, (job, result) in enumerate(zip(jobs, results, strict=True)):
        if envs.family(job.task.task.family).adversarial:
            out.append(measured(pool.for_member(i), job, result))
            continue
        budgets = sorted(result.snapshots)
        out.append([_row(job, result, b, scores[i, b]) for b in budgets])
    return out


def measure_seed(adapt_job: AdaptJob) -> int:
    """The seed of the job's measuring episodes (the same for each of its budgets)."""
    job = adapt_job.task
    return derived_seed(
        adapt_job.setting.seed, job.split, job.task.family, job.index, adapt_job.seed, _MEASURE
    )


def _row(
    adapt_job: AdaptJob,
    result: TrainResult,
    budget: int,
    measure_: tuple[float, float, int],
    scores: GameScores | None = None,
) -> Measurement:
    """adaptation.csv's row of one budget: the start's mean return, success and episodes."""
    job, task = adapt_job.task, adapt_job.task.task
    per_update = int(result.stats["steps"]) // int(result.stats["updates"]) if result.stats else 0
    reward, success, episodes = measure_
    return Measurement(
        method=adapt_job.method,
        family=task.family,
        split=job.split,
        task=job.index,
        seed=adapt_job.seed,
        budget=budget,
        env_steps=budget * per_update,
        mean_reward=reward,
        success=success,
        episodes=episodes,
        task_params=task.params_json(),
        **game_columns(scores),
        meta_seed=adapt_job.meta_seed,
        adaptation=adapt_job.setting.label(adapt_job.procedure),
        pretraining=adapt_job.pretraining,
    )


def measure(
    pool: EnvPool, setting: Setting, task: Task, policy: Policy, seed: int
) -> tuple[float, float, int]:
    """Episodes of `policy` on a fresh environment (same seed: same episodes for every policy)."""
    env = pool.env(task.family, task.params, seed, setting.eval.eval_episodes)
    try:
        generator = torch.Generator().manual_seed(seed)
        act = policy_actor(policy, setting.eval.deterministic, generator)
        return run_episodes(env, act, setting.eval.eval_episodes)
    finally:
        pool.release(env)
