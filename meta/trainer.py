"""meta-train's loop: sample tasks, train inner PPO from theta, interpolate, record, repeat."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs.constants import BEHAVIOR_NAME
from envs.interface import TaskEnvironment
from meta.algorithm import reptile
from meta.algorithm.ppo.train import Hyper, InnerResult, inner_train, policy_for
from meta.config import Config
from meta.curriculum.lessons import EnvironmentParameters, parse_environment_parameters
from meta.observe.progress import Progress
from meta.observe.reporter import StatsReporter, build_reporter, new_wandb_id
from meta.observe.timers import TimerTree
from meta.run.checkpoints import CheckpointManager
from meta.run.directory import TIMERS_FILE, RunStart, check, open_run
from meta.run.export import export_actor
from meta.run.records import (
    UPDATE_KEYS,
    MetaStep,
    extra_columns,
    nanmean,
    rows,
    scalars,
    update_rows,
)
from meta.runtime.envpool import EnvPool

log = logging.getLogger(__name__)


@dataclass
class Plan:
    """Everything validated before the run directory is touched."""

    cfg: Config
    run_id: str
    sampler: reptile.TaskSampler
    parameters: EnvironmentParameters
    pool: EnvPool


def plan(cfg: Config, run_id: str) -> Plan:
    """Validate the whole configuration and the run directory rules; write nothing."""
    cfg.validate()
    if not run_id:
        raise ValueError("run_id is empty")
    sampler = reptile.TaskSampler(cfg.meta.tasks, cfg.meta.split)
    parameters = parse_environment_parameters(cfg.environment_parameters, [BEHAVIOR_NAME])
    pool = EnvPool(cfg.env)
    if cfg.meta.algorithm == "joint" and cfg.env.backend != "native":
        raise ValueError("meta=joint splits areas across tasks and needs env.backend=native")
    pool.check([t.name for t in cfg.meta.tasks])
    check(cfg, run_id)
    return Plan(cfg, run_id, sampler, parameters, pool)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, so a meta-step is committed whole or not at all."""
    received: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda *args: received.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt


class MetaTrainer:
    """Owns one run: its directory, status, checkpoints, writers, timers and theta."""

    def __init__(self, plan: Plan, config_yaml: str, config_dict: dict[str, Any]) -> None:
        self.plan, self.cfg = plan, plan.cfg
        start: RunStart = open_run(self.cfg, plan.run_id, config_yaml)
        self.run_dir: Path = start.run_dir
        self.status = start.status
        self.status.durable = self.cfg.checkpoint.fsync
        plan.pool.log_folder = str(self.run_dir / "run_logs")
        self.checkpoints = CheckpointManager(
            self.run_dir, self.status, BEHAVIOR_NAME, self.cfg.checkpoint.keep_checkpoints
        )
        self.timers = TimerTree()
        self.last_reward: float | None = None
        self.restarts = 0
        self._initial_state(start)
        resumed = start.resume_state is not None
        self.reporter: StatsReporter = build_reporter(
            self.run_dir,
            run_id=plan.run_id,
            writers=[
                w for w in ("console", "csv", "tensorboard", "wandb") if getattr(self.cfg.logger, w)
            ],
            config=config_dict,
            resume_meta_step=self.meta_step - 1 if resumed else None,
            resume_env_steps=self.env_steps if resumed else None,
            console_every=self.cfg.logger.summary_freq,
            extra_columns=extra_columns(self.plan.parameters.lesson_nums()),
            inner_columns=["update", "task", *UPDATE_KEYS]
            if self.cfg.logger.per_update_csv
            else None,
            wandb_project=self.cfg.logger.wandb_project,
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
            return
        self.meta_step, self.env_steps, self.task_counts = 0, 0, {}
        env = self.plan.pool.env(self.cfg.meta.tasks[0].name, {}, self.cfg.seed)
        theta = policy_for(env, self.cfg.network, seed=self.cfg.seed).state_dict()
        self.plan.pool.release(env)
        if start.initial_weights is not None:
            differing = set(theta) ^ set(start.initial_weights)
            if differing:
                raise ValueError(
                    f"initialize_from={self.cfg.initialize_from}: weights do not match "
                    f"this network (differing keys: {sorted(differing)[:3]})"
                )
            theta = start.initial_weights
        self.theta = {k: v.detach().clone() for k, v in theta.items()}

    def run(self) -> Path:
        """Train until meta.steps; returns the run directory."""
        total = self.cfg.meta.steps
        with Progress(total, self.meta_step, enabled=self.cfg.logger.console) as progress:
            while self.meta_step < total:
                with self.timers.scope("meta_step"):
                    table = self.meta_step_once(self.meta_step)
                last = table[-1]
                progress.advance(last["task"], last["mean_reward"], last["success_rate"])
        self.finish()
        return self.run_dir

    def meta_step_once(self, k: int) -> list[dict[str, Any]]:
        """One meta-step: tasks, inner trainings, outer update, then commit it whole."""
        cfg, started = self.cfg, time.perf_counter()
        with self.timers.scope("sample_tasks"):
            rng = reptile.task_rng(cfg.seed, k)
            env_params = self.plan.parameters.sample(rng)
            tasks = [self._task(rng, env_params) for _ in range(self._tasks_per_step())]
        hyper = reptile.inner_hyper(cfg.ppo, cfg.meta, k)
        outer_lr = reptile.outer_step_size(cfg.meta, k)
        results = self._train(k, tasks, hyper)
        with self.timers.scope("interpolate"):
            if cfg.meta.algorithm == "reptile":
                new_theta = reptile.reptile_update(
                    self.theta, [r.weights for r in results], outer_lr
                )
            else:
                new_theta = results[0].weights
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
        rewards = [r.stats["Environment/Cumulative Reward"] for r in results]
        with deferred_interrupt(), self.timers.scope("commit"):
            changes = self.plan.parameters.update(
                (k + 1) / cfg.meta.steps, {BEHAVIOR_NAME: [x for x in rewards if x == x]}
            )
            table = self._commit(step, new_theta)
        settings = self.plan.parameters.settings
        for name, lesson in changes.items():
            new = settings[name].lessons[lesson]
            log.info(
                "Parameter %s moved to lesson %d (%s, value %s) after meta-step %d; "
                "this meta-step drew %s",
                name,
                lesson,
                new.name,
                new.value,
                k,
                ", ".join(f"{n}={v:g}" for n, v in env_params.items()),
            )
        return table

    def _tasks_per_step(self) -> int:
        meta = self.cfg.meta
        return {"single": 1, "joint": meta.joint_tasks}.get(meta.algorithm, meta.meta_batch_size)

    def _task(self, rng: np.random.Generator, env_params: dict[str, float]) -> reptile.Task:
        task = self.plan.sampler.sample(rng)
        if self.cfg.meta.algorithm == "single":
            # plain PPO keeps one task for the whole run, drawn once from the seed
            task = self.plan.sampler.sample(np.random.default_rng([self.cfg.seed, 0x51A6]))
        return reptile.Task(task.family, {**task.params, **env_params})

    def _train(self, k: int, tasks: list[reptile.Task], hyper: Hyper) -> list[InnerResult]:
        """The meta-step's trainings; a crashed build is restarted and the step retried."""
        crash_types = self.plan.pool.crash_types()
        while True:
            try:
                return self._train_once(k, tasks, hyper)
            except crash_types as crash:
                self.restarts += 1
                if self.restarts > self.cfg.env.max_restarts:
                    raise RuntimeError(
                        f"builds crashed {self.restarts} times (env.max_restarts="
                        f"{self.cfg.env.max_restarts}); last: {crash}"
                    ) from crash
                log.warning(
                    "A build crashed in meta-step %d (%s); restarting it and retrying "
                    "the meta-step from theta",
                    k,
                    crash,
                )
                self.plan.pool.restart_all()

    def _train_once(self, k: int, tasks: list[reptile.Task], hyper: Hyper) -> list[InnerResult]:
        cfg = self.cfg
        if cfg.meta.algorithm == "reptile":
            jobs = [(reptile.inner_seed(cfg.seed, k, i), [t], cfg.ppo) for i, t in enumerate(tasks)]
        else:
            # joint and single continue theta itself for reptile's env-step budget, with
            # constant schedules inside each chunk: annealing across chunks then makes the
            # whole run one linearly-annealed PPO training, as ML-Agents would run it.
            chunk = replace(
                cfg.ppo,
                max_steps=cfg.ppo.max_steps * cfg.meta.meta_batch_size,
                learning_rate_schedule="constant",
                beta_schedule="constant",
                epsilon_schedule="constant",
            )
            jobs = [(reptile.inner_seed(cfg.seed, k, 0), tasks, chunk)]
        results = []
        for seed, group, ppo in jobs:
            env = self._env(group, seed)
            try:
                with self.timers.scope("inner_training"):
                    results.append(
                        inner_train(
                            env,
                            self.theta,
                            cfg.network,
                            ppo,
                            seed=seed,
                            hyper=hyper,
                            stats_channel=env.stats_channel,
                            timers=self.timers,
                            device=cfg.torch_device,
                        )
                    )
            finally:
                self.plan.pool.release(env)
        return results

    def _env(self, tasks: list[reptile.Task], seed: int) -> TaskEnvironment:
        """One task's environment, or all tasks' areas side by side for joint training."""
        if len(tasks) > 1:
            return self.plan.pool.concat([(t.family, t.params) for t in tasks], seed)
        return self.plan.pool.env(tasks[0].family, tasks[0].params, seed)

    def _commit(self, step: MetaStep, new_theta: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
        """Apply and persist a finished meta-step: checkpoint and status, then the writers."""
        table = rows(step, self.theta, self.env_steps)
        self.theta, self.meta_step = new_theta, step.index + 1
        self.env_steps += int(sum(r.stats["steps"] for r in step.results))
        for row in table:
            row["total_env_steps"] = self.env_steps
            self.task_counts[row["task"]] = self.task_counts.get(row["task"], 0) + 1
        reward = nanmean(r["mean_reward"] for r in table)
        self.last_reward = None if reward != reward else reward
        state = {
            "theta": self.theta,
            "meta_step": self.meta_step,
            "env_steps": self.env_steps,
            "task_counts": dict(self.task_counts),
            "parameters": self.plan.parameters.state_dict(),
        }
        for name, lesson in self.plan.parameters.lesson_nums().items():
            self.status.set_lesson_num(name, lesson)
        self.status.set(BEHAVIOR_NAME, "env_steps", self.env_steps)
        with self.timers.scope("checkpoint"):
            interval = self.cfg.checkpoint.checkpoint_interval
            kept = self.meta_step % interval == 0 or self.meta_step == self.cfg.meta.steps
            self.checkpoints.save(
                self.meta_step, state, self.last_reward, self.env_steps, kept=kept
            )
        with self.timers.scope("write_stats"):
            self.reporter.write_rows("meta_steps", table)
            if self.cfg.logger.per_update_csv:
                self.reporter.write_rows("inner_updates", update_rows(step, table))
            self.reporter.write(step.index, self.env_steps, scalars(step, table, self.task_counts))
        return table

    def finish(self) -> None:
        """Final weights (and ONNX when asked); then close."""
        self.checkpoints.save_final(self.theta, self.env_steps, self.last_reward)
        if self.cfg.checkpoint.export_onnx:
            self._export_onnx()
        self.close()

    def _export_onnx(self) -> None:
        env = self.plan.pool.env(self.cfg.meta.tasks[0].name, {}, self.cfg.seed)
        policy = policy_for(env, self.cfg.network)
        self.plan.pool.release(env)
        policy.load_state_dict(self.theta)
        export_actor(self.checkpoints, policy)

    def close(self) -> None:
        """Write timers, close writers and builds (also after an interruption)."""
        self.timers.write(self.run_dir / TIMERS_FILE)
        self.reporter.close()
        self.plan.pool.close()


def train(cfg: Config, run_id: str) -> Path:
    """Validate, then run meta-training in-process (what meta-train does after composing)."""
    from omegaconf import OmegaConf

    checked = plan(cfg, run_id)
    resolved = {**asdict(cfg), "run_id": run_id}
    trainer = MetaTrainer(checked, OmegaConf.to_yaml(resolved), resolved)
    try:
        return trainer.run()
    except BaseException:
        trainer.close()
        raise
