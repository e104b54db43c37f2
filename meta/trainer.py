"""meta-train's loop: sample tasks, train inner PPO from theta, interpolate, record, repeat."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from meta import reptile
from meta.checkpoints import CheckpointManager
from meta.config import Config
from meta.curriculum import EnvironmentParameters, parse_environment_parameters
from meta.envpool import EnvPool
from meta.ppo import SUCCESS_STAT, Hyper, InnerResult, inner_train, policy_for
from meta.progress import Progress
from meta.rundir import BEHAVIOR, TIMERS_FILE, RunStart, check, open_run
from meta.stats import StatsReporter, build_reporter
from meta.timers import TimerTree

log = logging.getLogger(__name__)
LESSON_COLUMNS_PREFIX = "lesson/"


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
    parameters = parse_environment_parameters(cfg.environment_parameters, [BEHAVIOR])
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
        self.checkpoints = CheckpointManager(
            self.run_dir, self.status, BEHAVIOR, self.cfg.checkpoint.keep_checkpoints
        )
        self.timers = TimerTree()
        self.last_reward: float | None = None
        self.theta, self.meta_step, self.env_steps = self._initial_state(start)
        writers = [
            name
            for name in ("console", "csv", "tensorboard", "wandb")
            if getattr(self.cfg.logger, name)
        ]
        resumed = start.resume_state is not None
        self.reporter: StatsReporter = build_reporter(
            self.run_dir,
            run_id=plan.run_id,
            writers=writers,
            config=config_dict,
            resume_meta_step=self.meta_step - 1 if resumed else None,
            resume_env_steps=self.env_steps if resumed else None,
            console_every=self.cfg.logger.summary_freq,
            extra_columns=self._extra_columns(),
            inner_columns=["update", "task", *UPDATE_KEYS]
            if self.cfg.logger.per_update_csv
            else None,
            wandb_project=self.cfg.logger.wandb_project,
        )

    def _initial_state(self, start: RunStart) -> tuple[dict[str, torch.Tensor], int, int]:
        if start.resume_state is not None:
            state = start.resume_state
            self.plan.parameters.load_state_dict(state["parameters"])
            return state["theta"], int(state["meta_step"]), int(state["env_steps"])
        env = self.plan.pool.env(self.cfg.meta.tasks[0].name, {}, self.cfg.seed, 1)
        theta = policy_for(env, self.cfg.network, seed=self.cfg.seed).state_dict()
        if self.cfg.env.backend == "native":
            env.close()
        if start.initial_weights is not None:
            missing = set(theta) ^ set(start.initial_weights)
            if missing:
                raise ValueError(
                    f"initialize_from={self.cfg.initialize_from}: weights do not match "
                    f"this network (differing keys: {sorted(missing)[:3]})"
                )
            theta = {k: v.clone() for k, v in start.initial_weights.items()}
        return {k: v.detach().clone() for k, v in theta.items()}, 0, 0

    def _extra_columns(self) -> list[str]:
        lessons = [LESSON_COLUMNS_PREFIX + name for name in self.plan.parameters.lesson_nums()]
        return [
            "algorithm",
            "task_index",
            "episodes",
            "policy_loss",
            "value_loss",
            "entropy",
            "theta_delta_norm",
            "total_env_steps",
            *lessons,
            "env_params",
        ]

    def run(self) -> Path:
        """Train until meta.steps; returns the run directory."""
        total = self.cfg.meta.steps
        with Progress(total, self.meta_step, enabled=self.cfg.logger.console) as progress:
            while self.meta_step < total:
                k = self.meta_step
                with self.timers.scope("meta_step"):
                    rows = self.meta_step_once(k)
                progress.advance(
                    rows[-1]["task"], rows[-1]["mean_reward"], rows[-1]["success_rate"]
                )
        self.finish()
        return self.run_dir

    def meta_step_once(self, k: int) -> list[dict[str, Any]]:
        """One meta-step: tasks, inner trainings, outer update, then commit it whole."""
        cfg, started = self.cfg, time.perf_counter()
        with self.timers.scope("sample_tasks"):
            rng = reptile.task_rng(cfg.seed, k)
            env_params = self.plan.parameters.sample(rng)
            tasks = [
                self._with_env_params(self.plan.sampler.sample(rng), env_params)
                for _ in range(self._tasks_per_step())
            ]
        hyper, outer_lr = self._hyper(k), reptile.outer_step_size(cfg.meta, k)
        results = self._train(k, tasks, hyper)
        with self.timers.scope("interpolate"):
            if cfg.meta.algorithm == "reptile":
                new_theta = reptile.reptile_update(
                    self.theta, [r.weights for r in results], outer_lr
                )
            else:
                new_theta = results[0].weights
            theta_delta = reptile.distance(new_theta, self.theta)
        rewards = [r.stats["Environment/Cumulative Reward"] for r in results]
        lesson_changes = self.plan.parameters.update(
            (k + 1) / cfg.meta.steps, {BEHAVIOR: [x for x in rewards if x == x]}
        )
        rows = self._rows(
            k,
            tasks,
            results,
            hyper,
            outer_lr,
            theta_delta,
            env_params,
            time.perf_counter() - started,
        )
        with deferred_interrupt(), self.timers.scope("commit"):
            self.theta, self.meta_step = new_theta, k + 1
            self.env_steps += int(sum(r.stats["steps"] for r in results))
            self._commit(k, rows, results, outer_lr, theta_delta)
        for name, lesson in lesson_changes.items():
            log.info(
                "Parameter %s moved to lesson %d (%s) after meta-step %d",
                name,
                lesson,
                self.plan.parameters.lesson_names()[name],
                k,
            )
        return rows

    def _tasks_per_step(self) -> int:
        return 1 if self.cfg.meta.algorithm == "single" else self.cfg.meta.meta_batch_size

    def _with_env_params(self, task: reptile.Task, env_params: dict[str, float]) -> reptile.Task:
        if self.cfg.meta.algorithm == "single":
            # plain PPO keeps one task for the whole run, drawn once from the seed
            task = self.plan.sampler.sample(np.random.default_rng([self.cfg.seed, 0x51A6]))
        return reptile.Task(task.family, {**task.params, **env_params})

    def _hyper(self, k: int) -> Hyper:
        return reptile.inner_hyper(self.cfg.ppo, self.cfg.meta, k)

    def _train(self, k: int, tasks: list[reptile.Task], hyper: Hyper) -> list[InnerResult]:
        cfg = self.cfg
        if cfg.meta.algorithm == "reptile":
            return [self._inner(k, i, task, hyper) for i, task in enumerate(tasks)]
        # joint and single continue theta itself for the same env-step budget as reptile's
        # meta-batch, with constant schedules inside each chunk: annealing across chunks then
        # makes the whole run one linearly-annealed PPO training, as ML-Agents would run it.
        seed = reptile.inner_seed(cfg.seed, k, 0)
        if cfg.meta.algorithm == "joint":
            env = self.plan.pool.concat([(t.family, t.params) for t in tasks], seed)
        else:
            env = self.plan.pool.env(tasks[0].family, tasks[0].params, seed)
        ppo = _constant_schedules(cfg.ppo, cfg.ppo.max_steps * cfg.meta.meta_batch_size)
        try:
            result = inner_train(
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
        finally:
            env.close()
        return [result]

    def _inner(self, k: int, i: int, task: reptile.Task, hyper: Hyper) -> InnerResult:
        seed = reptile.inner_seed(self.cfg.seed, k, i)
        env = self.plan.pool.env(task.family, task.params, seed)
        try:
            with self.timers.scope("inner_training"):
                return inner_train(
                    env,
                    self.theta,
                    self.cfg.network,
                    self.cfg.ppo,
                    seed=seed,
                    hyper=hyper,
                    stats_channel=env.stats_channel,
                    timers=self.timers,
                    device=self.cfg.torch_device,
                )
        finally:
            if self.cfg.env.backend == "native":
                env.close()

    def _rows(
        self,
        k: int,
        tasks: list[reptile.Task],
        results: list[InnerResult],
        hyper: Hyper,
        outer_lr: float,
        theta_delta: float,
        env_params: dict[str, float],
        wall: float,
    ) -> list[dict[str, Any]]:
        lessons = {
            LESSON_COLUMNS_PREFIX + n: v for n, v in self.plan.parameters.lesson_nums().items()
        }
        rows = []
        for i, (task, result) in enumerate(zip(tasks, results, strict=False)):
            s = result.stats
            family = (
                "+".join(sorted({t.family for t in tasks}))
                if len(results) < len(tasks)
                else task.family
            )
            rows.append(
                {
                    "meta_step": k,
                    "task": family,
                    "task_params": task.params_json(),
                    "inner_steps": int(s["steps"]),
                    "mean_reward": s["Environment/Cumulative Reward"],
                    "success_rate": s[SUCCESS_STAT],
                    "learning_rate": hyper.learning_rate,
                    "beta": hyper.beta,
                    "epsilon": hyper.epsilon,
                    "outer_lr": outer_lr,
                    "weight_delta_norm": reptile.distance(result.weights, self.theta),
                    "wall_time_s": s["wall_time_s"] if len(results) > 1 else wall,
                    "algorithm": self.cfg.meta.algorithm,
                    "task_index": i,
                    "episodes": int(s["episodes"]),
                    "policy_loss": s["Losses/Policy Loss"],
                    "value_loss": s["Losses/Value Loss"],
                    "entropy": s["Policy/Entropy"],
                    "theta_delta_norm": theta_delta,
                    "total_env_steps": self.env_steps,
                    **lessons,
                    "env_params": ";".join(f"{n}={v:g}" for n, v in sorted(env_params.items())),
                }
            )
        return rows

    def _commit(
        self,
        k: int,
        rows: list[dict[str, Any]],
        results: list[InnerResult],
        outer_lr: float,
        theta_delta: float,
    ) -> None:
        for row in rows:
            row["total_env_steps"] = self.env_steps
        state = {
            "theta": self.theta,
            "meta_step": self.meta_step,
            "env_steps": self.env_steps,
            "parameters": self.plan.parameters.state_dict(),
        }
        reward = nanmean([r["mean_reward"] for r in rows])
        self.last_reward = None if reward != reward else reward
        for name, lesson in self.plan.parameters.lesson_nums().items():
            self.status.set_lesson_num(name, lesson)
        self.status.set(BEHAVIOR, "env_steps", self.env_steps)
        with self.timers.scope("checkpoint"):
            self.checkpoints.save(
                self.meta_step, state, self.last_reward, self.env_steps, kept=self._keeps(k)
            )
        self.reporter.write_rows("meta_steps", rows)
        self.reporter.write(
            k,
            self.env_steps,
            _scalars(rows, results, outer_lr, theta_delta, self.plan.parameters.lesson_nums()),
        )

    def _keeps(self, k: int) -> bool:
        interval = self.cfg.checkpoint.checkpoint_interval
        return (k + 1) % interval == 0 or k + 1 == self.cfg.meta.steps

    def finish(self) -> None:
        """Final weights, status and timers; close writers and builds."""
        self.checkpoints.save_final(self.theta, self.env_steps, self.last_reward)
        if self.cfg.checkpoint.export_onnx:
            from meta.export import export_policy

            export_policy(self.checkpoints, self.theta, self.cfg.network)
        self.close()

    def close(self) -> None:
        """Write timers, close writers and builds (also after an interruption)."""
        self.timers.write(self.run_dir / TIMERS_FILE)
        self.reporter.close()
        self.plan.pool.close()


def train(cfg: Config, run_id: str) -> Path:
    """Validate, then run meta-training in-process (what meta-train does after composing)."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    checked = plan(cfg, run_id)
    resolved = {**asdict(cfg), "run_id": run_id}
    trainer = MetaTrainer(checked, OmegaConf.to_yaml(resolved), resolved)
    try:
        return trainer.run()
    except BaseException:
        trainer.close()
        raise


UPDATE_KEYS = [
    "Losses/Policy Loss",
    "Losses/Value Loss",
    "Policy/Entropy",
    "Policy/Learning Rate",
    "Policy/Beta",
    "Policy/Epsilon",
]


def nanmean(values: Any) -> float:
    """Mean of the finite values; NaN (without a warning) when there are none."""
    finite = [float(v) for v in values if v == v]
    return float(np.mean(finite)) if finite else float("nan")


def _constant_schedules(ppo: Any, max_steps: int) -> Any:
    from dataclasses import replace

    return replace(
        ppo,
        max_steps=max_steps,
        learning_rate_schedule="constant",
        beta_schedule="constant",
        epsilon_schedule="constant",
    )


def _scalars(
    rows: list[dict[str, Any]],
    results: list[InnerResult],
    outer_lr: float,
    theta_delta: float,
    lessons: dict[str, int],
) -> dict[str, float]:
    first = rows[0]
    scalars = {
        "Environment/Cumulative Reward": (nanmean([r["mean_reward"] for r in rows])),
        "Environment/Episode Length": (
            nanmean([r.stats["Environment/Episode Length"] for r in results])
        ),
        "Losses/Policy Loss": float(np.mean([r["policy_loss"] for r in rows])),
        "Losses/Value Loss": float(np.mean([r["value_loss"] for r in rows])),
        "Policy/Entropy": float(np.mean([r["entropy"] for r in rows])),
        "Policy/Learning Rate": first["learning_rate"],
        "Policy/Beta": first["beta"],
        "Policy/Epsilon": first["epsilon"],
        "Meta/Outer Learning Rate": outer_lr,
        "Meta/Weight Delta Norm": theta_delta,
        "Meta/Success Rate": (nanmean([r["success_rate"] for r in rows])),
    }
    for row in rows:
        scalars[f"Meta/{row['task']}/Reward"] = row["mean_reward"]
        scalars[f"Meta/{row['task']}/Success"] = row["success_rate"]
        scalars[f"Meta/{row['task']}/Count"] = scalars.get(f"Meta/{row['task']}/Count", 0) + 1
    if lessons:
        scalars["Environment/Lesson"] = float(sum(lessons.values()))
    return scalars
