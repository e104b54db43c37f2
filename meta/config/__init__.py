"""Dataclass configs, one per concern; Hydra composes them, the library receives plain objects."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import envs
from envs.constants import SPLITS
from meta.config.evaluation import EvalConfig
from meta.config.metric import check_objective
from meta.config.ppo import NetworkConfig, PPOConfig, check_normalizer, positive
from meta.config.runtime import RuntimeConfig, check_matmul_precision, check_seeds

INNER_OPTIMIZERS = ("fresh", "carry")
BACKENDS = ("native", "unity")


@dataclass
class TaskConfig:
    """One task family of the meta-training distribution."""

    name: str = "FindTarget"
    """Family: FindTarget, CarryObject or Sumo (a game of teams: needs ppo.self_play)."""
    weight: float = 1.0
    """Relative probability of sampling this family."""
    params: dict[str, Any] = field(default_factory=dict)
    """Parameter overrides: a number fixes it, a [low, high] pair sets its sampling range."""


def _default_tasks() -> list[TaskConfig]:
    return [TaskConfig("FindTarget", 0.5), TaskConfig("CarryObject", 0.5)]


@dataclass
class MetaConfig:
    """The outer loop."""

    algorithm: str = "reptile"
    """`reptile`, `fomaml` (first-order MAML), `joint` (multi-task PPO baseline) or `single`
    (plain PPO on one task)."""
    steps: int = 100
    """Meta-steps K."""
    outer_lr: float = 0.5
    """Reptile step size at meta-step 0 (1.0 with meta_batch_size 1 is sequential fine-tuning)."""
    outer_lr_final: float | None = None
    """Reptile step size approached linearly by the last meta-step; null: 0, except that
    outer_lr 1 (theta replaced by phi: sequential fine-tuning) then stays 1."""
    meta_batch_size: int = 1
    """Tasks trained per meta-step; theta moves towards their mean."""
    tasks: list[TaskConfig] = field(default_factory=_default_tasks)
    """Families with weights and parameter overrides."""
    joint_tasks: int = 4
    """joint: tasks sampled per chunk, their areas side by side (the budget stays reptile's)."""
    anneal: bool = True
    """Anneal the inner learning_rate, beta and epsilon as x0*(1-k/K) across meta-steps."""
    learning_rate_floor: float = 1.0e-10
    """Floor of the annealed inner learning rate."""
    beta_floor: float = 1.0e-5
    """Floor of the annealed entropy coefficient."""
    epsilon_floor: float = 0.1
    """Floor of the annealed clip range."""
    split: str = "train"
    """Parameter ranges tasks are drawn from: `train` (meta-training) or `test` (held out)."""
    inner_optimizer: str = "fresh"
    """reptile: `fresh` (a new Adam per inner training) or `carry` (Adam's state continues
    from task to task, as in supervised-reptile); joint and single always carry it."""

    @property
    def final_outer_lr(self) -> float:
        """outer_lr_final with its default resolved."""
        if self.outer_lr_final is not None:
            return self.outer_lr_final
        return 1.0 if self.outer_lr == 1.0 else 0.0

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field (what the meta-learner's traits
        allow is checked by its registry, meta.algorithm.registry.validate)."""
        positive("meta.steps", self.steps)
        positive("meta.meta_batch_size", self.meta_batch_size)
        positive("meta.joint_tasks", self.joint_tasks)
        if not self.tasks:
            raise ValueError("meta.tasks is empty: give at least one task family")
        if self.inner_optimizer not in INNER_OPTIMIZERS:
            raise ValueError(
                f"meta.inner_optimizer: unknown {self.inner_optimizer!r} "
                f"(use one of {INNER_OPTIMIZERS})"
            )
        if self.split not in SPLITS:
            raise ValueError(f"meta.split must be 'train' or 'test', got {self.split!r}")
        for i, task in enumerate(self.tasks):
            if not 0 < task.weight < math.inf:
                raise ValueError(
                    f"meta.tasks[{i}] ({task.name}): weight must be a finite number > 0, "
                    f"got {task.weight}"
                )

    def check_fractions(self) -> None:
        """An interpolating learner's step sizes are fractions of the way to the trained weights."""
        if not 0.0 < self.outer_lr <= 1.0:
            raise ValueError(f"meta.outer_lr must be in (0, 1], got {self.outer_lr}")
        if not 0.0 <= self.final_outer_lr <= 1.0:
            raise ValueError(f"meta.outer_lr_final must be in [0, 1], got {self.outer_lr_final}")

    def check_games(self, no_games: str) -> None:
        """A learner that cannot train games of teams gets none."""
        for i, task in enumerate(self.tasks):
            if task.name in envs.FAMILIES and envs.family(task.name).adversarial:
                raise ValueError(
                    f"meta={self.algorithm}: meta.tasks[{i}] ({task.name}) is a game of teams; "
                    f"{no_games} (use meta=reptile for games)"
                )


@dataclass
class EnvConfig:
    """Where the tasks run."""

    backend: str = "native"
    """`native` (in-process, fast) or `unity` (builds over the ML-Agents protocol)."""
    num_areas: int = 64
    """Training areas (agents) per environment."""
    num_envs: int = 1
    """Build processes per family (unity backend)."""
    path: dict[str, str] = field(default_factory=lambda: dict(envs.DEFAULT_BUILDS))
    """Build per family (unity backend; default: envs/builds/<family>); relative paths resolve
    against the project."""
    base_port: int = 5005
    """First gRPC port (unity backend); worker i listens on base_port + worker_id."""
    timeout_wait: int = 60
    """Seconds to wait for a build to connect."""
    max_restarts: int = 3
    """Build crashes tolerated per run before giving up."""
    no_graphics: bool = True
    """Pass -nographics to builds."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if self.backend not in BACKENDS:
            raise ValueError(f"env.backend: unknown {self.backend!r} (use one of {BACKENDS})")
        positive("env.num_areas", self.num_areas)
        positive("env.num_envs", self.num_envs)
        positive("env.timeout_wait", self.timeout_wait)


@dataclass
class CheckpointConfig:
    """Kept checkpoints."""

    keep_checkpoints: int = 5
    """Kept `Brain-<env_steps>.pt`/`.onnx` pairs, as ML-Agents keeps them (older ones pruned)."""
    checkpoint_interval: int = 10
    """Meta-steps between kept checkpoints (the resumable state is saved every meta-step)."""
    fsync: bool = False
    """fsync every status and checkpoint write (writes are atomic either way; this also makes
    them survive a power loss, at about 8 ms a file)."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        positive("checkpoint.keep_checkpoints", self.keep_checkpoints)
        positive("checkpoint.checkpoint_interval", self.checkpoint_interval)


@dataclass
class LoggerConfig:
    """Stats writers; any combination."""

    console: bool = True
    """Progress bar and a summary line every summary_freq meta-steps."""
    csv: bool = True
    """meta_steps.csv (always useful to notebooks)."""
    per_update_csv: bool = False
    """Also inner_updates.csv, one row per PPO update."""
    tensorboard: bool = True
    """TensorBoard event files under the run directory."""
    wandb: bool = False
    """Weights & Biases (offline unless WANDB_MODE says otherwise)."""
    wandb_project: str = "meta-harness"
    """wandb project name."""
    summary_freq: int = 1
    """Meta-steps between console summary lines."""


@dataclass
class Config:
    """Root of the composed configuration."""

    run_id: str = ""
    """Run directory name; derived from the overrides when empty."""
    seed: int = 0
    """Seed of every random number in the run."""
    seeds: list[int] | None = None
    """Several runs of this setting, one per seed: each meta-step's inner trainings of all of
    them run as one call of the runtime (stacked), each run written as `seed=<s>` alone writes
    it (run id `<run_id>-seed_<s>` when run_id is given); null: one run, of `seed`."""
    resume: bool = False
    """Continue the run in results_dir/run_id after its last completed meta-step."""
    force: bool = False
    """Start over in an existing run directory."""
    initialize_from: str | None = None
    """Run id whose latest weights start theta."""
    results_dir: str = "results"
    """Parent of run directories."""
    torch_device: str = "cpu"
    """Device of the policy (`cpu`, `cuda`, `cuda:1`)."""
    torch_threads: int = 1
    """torch intra-op threads (small MLPs get slower with many); 0 leaves torch's default."""
    torch_matmul_precision: str = "highest"
    """`torch.set_float32_matmul_precision` for the run and its workers: `highest` (float32
    products, what digests and committed results assume), `high` (TF32 where the device has it)
    or `medium` (bfloat16 products: a GPU's, or a CPU's with AMX); see docs/performance.md."""
    meta: MetaConfig = field(default_factory=MetaConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    environment_parameters: dict[str, Any] = field(default_factory=dict)
    """ML-Agents `environment_parameters`: constants, samplers and curricula."""
    optimized_metric: str | None = None
    """What the run returns to a search (`hparams_search`): measured after training on tasks
    of the training distribution, e.g. `success_iqm@4`; null: nothing (meta.config.metric)."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for part in (self.meta, self.ppo, self.network, self.env, self.runtime, self.checkpoint):
            part.validate()
        check_normalizer(self.network, self.ppo)
        if self.seeds is not None:
            check_seeds(self.seeds)
        if self.resume and self.force:
            raise ValueError("resume=true and force=true contradict each other: choose one")
        check_matmul_precision(self.torch_matmul_precision)
        if self.optimized_metric:
            check_objective(self.optimized_metric, self.eval.splits, self.eval.budgets)
