"""The outer loop of one run: sample tasks, train inner PPO from theta, interpolate, commit.

A meta-step's inner trainings are the meta-learner's requests, run by an executor, retried. The
requests are picklable (meta.algorithm.request) and run in this process (`runtime=local`)
or on Ray actors (`runtime=ray`). Independent requests train as stacks; a chain (Adam's
state carried from training to training) runs one after the other, each request continuing
what the previous one left. `InnerTrainings.trainings` says which jobs a meta-step needs and
takes their results, so that whoever runs them may run other runs' jobs beside them
(meta.trainer.seeds); `run` runs them on the run's own executor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import torch
from rich.console import Console

from envs.constants import BEHAVIOR_NAME
from meta.algorithm import reptile
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.rollout import Timers
from meta.algorithm.registry import learner_class
from meta.algorithm.reptile import MetaLearner
from meta.algorithm.request import OptimizerState, SelfPlayState, Task, TrainResult
from meta.algorithm.training import is_game
from meta.errors import first_line
from meta.observe.progress import Progress
from meta.observe.reporter import (
    INNER_UPDATES_TABLE,
    META_STEPS_TABLE,
    StatsReporter,
)
from meta.observe.tags import CUMULATIVE_REWARD
from meta.observe.timers import RunTimers
from meta.observe.writers import build_reporter, new_wandb_id
from meta.process import faults
from meta.process.signals import deferred_interrupt
from meta.run.checkpoints import CheckpointManager
from meta.run.directory import TIMERS_FILE, RunStart, open_run
from meta.run.records import (
    JOURNAL,
    MetaStep,
    elo_points,
    nanmean,
    plain,
    rows,
    scalars,
    table_columns,
    update_rows,
)
from meta.runtime.executor import Executor, make_executor
from meta.runtime.jobs import Training
from meta.trainer.preflight import TrainingPlan, weights_mismatch

log = logging.getLogger(__name__)
J = TypeVar("J")
S = TypeVar("S")
T = TypeVar("T")


def drive(steps: Generator[J, S, T], run: Callable[[J], S]) -> T:
    """Run what `steps` yields with `run`, sending each answer back; what `steps` returns."""
    try:
        jobs = next(steps)
        while True:
            jobs = steps.send(run(jobs))
    except StopIteration as done:
        return done.value


class BuildsExhausted(RuntimeError):
    """Builds crashed more often than env.max_restarts allows (one line)."""


class InnerTrainings:
    """Runs each meta-step's requests of the run's meta-learner; counts restarts of builds."""

    def __init__(self, plan: TrainingPlan, learner: MetaLearner, timers: Timers) -> None:
        self.plan, self.cfg, self.learner, self.timers = plan, plan.cfg, learner, timers
        self.restarts = 0
        self._executor: Executor | None = None

    def start_executor(self) -> Executor:
        """Where the requests run, started on the first call (Ray's actors with the first step)."""
        if self._executor is None:
            runtime = self.cfg.runtime
            self._executor = make_executor(
                runtime, self.cfg.env, runtime.workers, self.plan.pool, self.timers
            )
            if self.cfg.runtime.backend == "ray":
                self.plan.pool.close()  # the actors own the environments; drop the driver's builds
            if self.learner.chained:
                log.info("the inner trainings chain Adam's state: one after the other")
        return self._executor

    def trainings(
        self,
        k: int,
        theta: dict[str, torch.Tensor],
        tasks: list[Task],
        hyper: Hyper,
        optimizer_state: OptimizerState | None = None,
        self_play_state: SelfPlayState | None = None,
    ) -> Generator[list[Training], list[TrainResult], list[TrainResult]]:
        """The meta-step's trainings as job lists to run, each sent back its results in order:
        one list of independent trainings, or one list per link of a chain; returns them all."""
        requests = self.learner.requests(k, theta, tasks, hyper, self_play_state)
        if not self.learner.chained:
            return (yield [Training(r) for r in requests])
        results: list[TrainResult] = []
        for request in requests:
            if results:
                request = self.learner.continued(request, results[-1])
            else:
                request = request.carrying(optimizer_state=optimizer_state)
            results += yield [Training(request)]
        return results

    def run(self, k: int, jobs: list[Training]) -> list[TrainResult]:
        """Meta-step k's jobs on the run's executor, results in order."""
        return list(self.start_executor().run(jobs, partial(self.crashed, k)))

    def crashed(self, k: int, crash: BaseException) -> None:
        """Count a crash; BuildsExhausted once env.max_restarts is spent."""
        self.restarts += 1
        if self.restarts > self.cfg.env.max_restarts:
            raise BuildsExhausted(
                f"builds crashed {self.restarts} times (env.max_restarts="
                f"{self.cfg.env.max_restarts}); last: {crash}"
            ) from crash
        what = (
            "A Ray actor was lost"
            if type(crash).__module__.startswith("ray")
            else "A build crashed"
        )
        log.warning(
            "%s in meta-step %d (%s); restarting it and retrying its inner training from theta",
            what,
            k,
            first_line(crash),
        )

    def close(self) -> None:
        """Release the executor's workers (the run closes its own pool)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None


OPTIMIZER = "optimizer"
"""Checkpoint key of Adam's state where it carries over (joint, single, reptile with carry)."""
SELF_PLAY = "self_play"
"""Checkpoint key of the run's self-play state: its ELO (and, for joint and single, the ghost)."""
ELO = "elo"
"""ML-Agents' status key (StatusType.ELO) of the behavior's rating."""
Rows = list[dict[str, Any]]
"""A meta-step's meta_steps.csv rows."""


class MetaTrainer:
    """Owns one run: its directory, status, checkpoints, writers, timers and theta."""

    def __init__(
        self,
        plan: TrainingPlan,
        config_yaml: str,
        config_dict: dict[str, Any],
        console: Console | None = None,
        on_open: Callable[[], object] | None = None,
        label: str | None = None,
    ) -> None:
        """`label` names the run in its console lines, for a run trained among others."""
        self.plan, self.cfg, self.console = plan, plan.cfg, console
        self.label = label
        self._closed = False
        self.completed = False
        """Whether the final weights and status are written: the run is complete."""
        with deferred_interrupt():  # a signal comes before the run is written or after on_open
            start: RunStart = open_run(self.cfg, plan.run_id, config_yaml)
            if on_open is not None:
                on_open()
        self.run_dir: Path = start.run_dir
        self.status = start.status
        self.status.durable = self.cfg.checkpoint.fsync
        plan.pool.log_folder = str(self.run_dir / "run_logs")
        self.checkpoints = CheckpointManager(
            self.run_dir,
            self.status,
            BEHAVIOR_NAME,
            self.cfg.checkpoint.keep_checkpoints,
            network=self.cfg.network,
        )
        self.timers = RunTimers()
        self.learner = learner_class(self.cfg.meta.algorithm)(self.cfg)
        self.inner = InnerTrainings(plan, self.learner, self.timers)
        self.last_reward: float | None = None
        self._initial_state(start)
        self.start_step = self.meta_step
        self.reporter = self._reporter(config_dict, resumed=start.resume_state is not None)
        if start.resume_state is not None:
            for name, table_rows in start.resume_state[JOURNAL].items():
                self.reporter.restore_rows(name, self.meta_step - 1, table_rows)

    def _reporter(self, config_dict: dict[str, Any], resumed: bool) -> StatsReporter:
        logger = self.cfg.logger
        extra, inner = table_columns(self.plan.parameters.lesson_nums(), logger.per_update_csv)
        return build_reporter(
            self.run_dir,
            run_id=self.plan.run_id,
            writers=[w for w in ("console", "csv", "tensorboard", "wandb") if getattr(logger, w)],
            config=config_dict,
            resume_meta_step=self.meta_step - 1 if resumed else None,
            resume_env_steps=self.env_steps if resumed else None,
            console_every=logger.summary_freq,
            console_label=self.label,
            extra_columns=extra,
            inner_columns=inner,
            wandb_project=logger.wandb_project,
            wandb_id=self._wandb_id(),
        )

    def _wandb_id(self) -> str | None:
        """The run's wandb id, kept in the status file so a resumed run continues it."""
        if not self.cfg.logger.wandb:
            return None
        wandb_id = self.status.get(BEHAVIOR_NAME, "wandb_run_id")
        if wandb_id is None:
            wandb_id = new_wandb_id()
            self.status.set(BEHAVIOR_NAME, "wandb_run_id", wandb_id)
            self.status.save()
        return str(wandb_id)

    def _initial_state(self, start: RunStart) -> None:
        if start.resume_state is not None:
            state = start.resume_state
            self.plan.parameters.load_state_dict(state["parameters"])
            self.theta: dict[str, torch.Tensor] = state["theta"]
            self.meta_step, self.env_steps = int(state["meta_step"]), int(state["env_steps"])
            self.task_counts: dict[str, int] = dict(state["task_counts"])
            self.optimizer_state: OptimizerState | None = state.get(OPTIMIZER)
            self.self_play_state: SelfPlayState | None = state.get(SELF_PLAY)
            return
        self.meta_step, self.env_steps, self.task_counts = 0, 0, {}
        self.optimizer_state = None
        self.self_play_state = None
        env = self.plan.pool.env(self.cfg.meta.tasks[0].name, {}, self.cfg.seed)
        is_game(env, self.cfg.ppo)  # a build of teams needs ppo.self_play: refuse it now
        theta = policy_for(env, self.cfg.network, seed=self.cfg.seed).state_dict()
        self.plan.pool.release(env)
        if start.initial_weights is not None:
            mismatch = weights_mismatch(theta, start.initial_weights)
            if mismatch:
                raise ValueError(
                    f"initialize_from={self.cfg.initialize_from}: its weights do not fit this "
                    f"network ({mismatch})"
                )
            theta = start.initial_weights
        self.theta = {k: v.detach().clone() for k, v in theta.items()}

    @property
    def committed(self) -> int:
        """Meta-steps the run directory holds: the last commit, or where the run resumed."""
        done = self.checkpoints.committed
        return self.start_step if done is None else done

    def run(self) -> Path:
        """Train until meta.steps; returns the run directory."""
        total, enabled = self.cfg.meta.steps, self.cfg.logger.console
        with Progress(total, self.meta_step, self.console, enabled) as progress:
            while self.meta_step < total:
                with self.timers.scope("meta_step"):
                    table = self.meta_step_once(self.meta_step)
                progress.finished(table)
        self.finish()
        return self.run_dir

    def meta_step_once(self, k: int) -> Rows:
        """One meta-step, its inner trainings on the run's executor; its meta_steps.csv rows."""
        return drive(self.meta_step_jobs(k), partial(self.inner.run, k))

    def meta_step_jobs(self, k: int) -> Generator[list[Training], list[TrainResult], Rows]:
        """One meta-step: tasks, inner trainings, outer update, then commit it whole.

        It yields the inner trainings as lists of jobs to run and is sent their results
        (`InnerTrainings`); it returns the meta-step's rows once committed.
        """
        cfg, started = self.cfg, time.perf_counter()
        with self.timers.scope("sample_tasks"):
            rng = reptile.task_rng(cfg.seed, k)
            env_params = self.plan.parameters.sample(rng)
            tasks = self.learner.tasks(self.plan.sampler, rng, env_params)
        hyper = reptile.inner_hyper(cfg.ppo, cfg.meta, k)
        outer_lr = reptile.outer_step_size(cfg.meta, k)
        faults.at("inner_training", k)
        results = yield from self.inner.trainings(
            k, self.theta, tasks, hyper, self.optimizer_state, self.self_play_state
        )
        with self.timers.scope("interpolate"):
            new_theta = self.learner.update(self.theta, results, outer_lr)
            theta_delta = reptile.distance(new_theta, self.theta)
        step = MetaStep(
            k,
            cfg.meta.algorithm,
            tasks,
            results,
            hyper,
            outer_lr,
            theta_delta,
            env_params,
            self.plan.parameters.lesson_nums(),
            time.perf_counter() - started,
        )
        rewards = [r.stats[CUMULATIVE_REWARD] for r in results]
        with deferred_interrupt(), self.timers.scope("commit"):
            changes = self.plan.parameters.update(
                (k + 1) / cfg.meta.steps, {BEHAVIOR_NAME: [x for x in rewards if x == x]}
            )
            optimizer_state = self.learner.optimizer_after(results)
            self_play_state = self.learner.self_play_after(self.self_play_state, results)
            table = self._commit(step, new_theta, optimizer_state, self_play_state)
        self.plan.parameters.announce(changes, k, env_params)
        return table

    def _commit(
        self,
        step: MetaStep,
        new_theta: dict[str, torch.Tensor],
        optimizer_state: OptimizerState | None = None,
        self_play_state: SelfPlayState | None = None,
    ) -> Rows:
        """Commit a finished meta-step whole (its checkpoint holds its rows), then the writers."""
        table = rows(step, self.theta, self.env_steps)
        summaries = elo_points(step, self.env_steps)
        self.theta, self.meta_step = new_theta, step.index + 1
        self.optimizer_state = optimizer_state
        self.self_play_state = self_play_state
        self.env_steps += int(sum(r.stats["steps"] for r in step.results))
        for row in table:
            row["total_env_steps"] = self.env_steps
            if self_play_state is not None:
                row["elo"] = float(self_play_state["elo"])  # the run's rating after the step
            self.task_counts[row["task"]] = self.task_counts.get(row["task"], 0) + 1
        reward = nanmean(r["mean_reward"] for r in table)
        self.last_reward = None if reward != reward else reward
        journal = {META_STEPS_TABLE: plain(table)}
        if self.cfg.logger.per_update_csv:
            journal[INNER_UPDATES_TABLE] = plain(update_rows(step, table))
        state = {
            "theta": self.theta,
            "meta_step": self.meta_step,
            "env_steps": self.env_steps,
            "task_counts": dict(self.task_counts),
            "parameters": self.plan.parameters.state_dict(),
            OPTIMIZER: self.optimizer_state,
            SELF_PLAY: self.self_play_state,
            JOURNAL: journal,
        }
        for name, lesson in self.plan.parameters.lesson_nums().items():
            self.status.set_lesson_num(name, lesson)
        self.status.set(BEHAVIOR_NAME, "env_steps", self.env_steps)
        if self.self_play_state is not None:
            self.status.set(BEHAVIOR_NAME, ELO, float(self.self_play_state["elo"]))
        with self.timers.scope("checkpoint"):
            interval = self.cfg.checkpoint.checkpoint_interval
            kept = self.meta_step % interval == 0 or self.meta_step == self.cfg.meta.steps
            self.checkpoints.save(
                self.meta_step, state, self.last_reward, self.env_steps, kept=kept
            )
        with self.timers.scope("write_stats"):
            for name, table_rows in journal.items():
                self.reporter.write_rows(name, table_rows)
            faults.at("after_rows", step.index)
            self.reporter.write_summaries(step.index, summaries)
            self.reporter.write(step.index, self.env_steps, scalars(step, table, self.task_counts))
            faults.at("after_writers", step.index)
        return table

    def finish(self) -> None:
        """Final weights, ours (Brain.pt) and ML-Agents' (Brain.onnx), whole; then close."""
        with deferred_interrupt():
            self.checkpoints.save_final(self.theta, self.env_steps, self.last_reward)
            self.completed = True
            faults.at("after_final", self.meta_step)
        self.close()

    def close(self) -> None:
        """Write timers, close writers and builds (also after an interruption); once."""
        if self._closed:
            return
        self._closed = True
        try:
            self.timers.write(self.run_dir / TIMERS_FILE)
            self.reporter.close()
        finally:
            try:
                self.inner.close()
            finally:
                self.plan.pool.close()
