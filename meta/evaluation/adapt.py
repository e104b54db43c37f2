"""meta-eval's measurements: held-out tasks, adaptation by inner PPO, episodes without training."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import torch

import envs
from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.policy import Policy, policy_with
from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.reptile import Task
from meta.algorithm.request import TrainRequest, TrainResult
from meta.config import Config
from meta.evaluation.config import EvalConfig, Procedure
from meta.evaluation.episodes import (
    policy_actor,
    run_episodes,
    run_stacked_episodes,
    stacked_actor,
)
from meta.evaluation.games import GameScores, game_columns, measure_game
from meta.evaluation.statistics import Measurement
from meta.evaluation.tasks import EvalTask, derived_seed
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import Executor, retrying
from meta.runtime.jobs import run_request
from meta.runtime.slots import claimed_slot

_ADAPT, _MEASURE = 0xADA7, 0xE7A1
RETRIES = 3
"""Lost workers (a Ray actor's process died) meta-eval retries in all before it gives up."""


@dataclass(frozen=True)
class Setting:
    """What every adaptation shares: the run's network and PPO, and meta-eval's options."""

    run: Config
    eval: EvalConfig
    seed: int
    device: str = "cpu"

    def buffer_size(self, procedure: Procedure) -> int:
        """Agent-steps per update of `procedure`."""
        return procedure.buffer_size or self.eval.buffer_size

    def steps_per_update(self, agents: int, procedure: Procedure | None = None) -> int:
        """Agent-steps one update collects (the buffer rounded up to whole rounds of agents)."""
        buffer = self.buffer_size(procedure or Procedure())
        return math.ceil(buffer / agents) * agents

    def budgets(self, procedure: Procedure | None = None) -> list[int]:
        """eval.budgets, continued so that every procedure reaches the same env-step horizon.

        The horizon is the largest budget at the largest update size among eval.adaptation (or
        eval.search's choices); a procedure with smaller updates also gets the budgets of the
        larger size's env steps beyond its own largest budget (e.g. 24, 32, 48, 64 updates of
        512 for 6, 8, 12, 16 of 2,048), so that "not reached" means the same number of env
        steps for every start.
        """
        own = self.buffer_size(procedure or Procedure())
        largest, top = self.largest_update(), max(self.eval.budgets)
        scaled = {-(-b * largest // own) for b in self.eval.budgets}
        return sorted({*self.eval.budgets, *(b for b in scaled if b > top)})

    def largest_update(self) -> int:
        """The largest buffer size a procedure may adapt with."""
        return max(self.buffer_size(Procedure(buffer_size=b)) for b in self.eval.update_sizes())

    def horizon(self) -> int:
        """Agent-steps every procedure adapts for at least (the largest budget's)."""
        return max(self.eval.budgets) * self.largest_update()

    def ppo(self, procedure: Procedure | None = None) -> PPOConfig:
        """The run's PPO with the procedure's optimizer, learning rate and buffer; beta and
        epsilon held constant, the learning rate too unless the procedure's schedule is linear.

        An adaptation runs a number of updates (its largest budget), not of agent-steps. A
        linear learning rate decays over max_steps, that largest budget's agent-steps (the
        horizon every procedure reaches), to ML-Agents' floor: each budget measured is a
        snapshot of that one training, part-way down its schedule.
        """
        procedure = procedure or Procedure()
        buffer = self.buffer_size(procedure)
        return replace(
            self.run.ppo,
            optimizer=procedure.optimizer or self.run.ppo.optimizer,
            learning_rate=procedure.learning_rate or self.run.ppo.learning_rate,
            buffer_size=buffer,
            num_epoch=procedure.num_epoch or self.run.ppo.num_epoch,
            batch_size=min(procedure.batch_size or self.run.ppo.batch_size, buffer),
            max_steps=max(*self.budgets(procedure), 1) * buffer,
            learning_rate_schedule=procedure.learning_rate_schedule or "constant",
            beta_schedule="constant",
            epsilon_schedule="constant",
        )

    def label(self, procedure: Procedure) -> str:
        """The procedure in words, e.g. `adam lr=0.003 buffer=512 reset=value_head`."""
        ppo = self.run.ppo
        optimizer = procedure.optimizer or ppo.optimizer
        learning_rate = procedure.learning_rate or ppo.learning_rate
        label = f"{optimizer} lr={learning_rate:g} buffer={self.buffer_size(procedure)}"
        if procedure.num_epoch is not None:
            label += f" epochs={procedure.num_epoch}"
        if procedure.batch_size is not None:
            label += f" batch={procedure.batch_size}"
        if procedure.learning_rate_schedule is not None:
            label += f" schedule={procedure.learning_rate_schedule}"
        if procedure.log_std is not None:
            label += f" log_std={procedure.log_std:g}"
        if procedure.reset:
            label += f" reset={'+'.join(procedure.reset)}"
        return label


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
    if len(members) < 2 or pool.cfg.backend != "native":
        return [measured(pool, job, r) for job, r in zip(jobs, results, strict=True)]
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
            out.append(measured(pool, job, result))
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
