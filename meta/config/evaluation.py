"""Settings of meta-eval: which starts, tasks, budgets, adaptation procedures and statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from meta.config.ppo import OPTIMIZERS, SCHEDULES, PPOConfig

SELECTION_SPLITS = ("validation", "train")
"""Where each start's procedure may be chosen: tasks of the training distribution, never test."""
EVAL_SPLITS = ("train", "test", "validation")
"""meta-eval's task splits: `validation` draws from the `train` ranges with seeds of its own."""
PICKED = ("optimizer", "buffer_size", "num_epoch", "batch_size")
"""eval.search's fields that list the values of one Procedure field to choose from."""
REACHES = ("first", "sustained")
"""When a curve has reached the target (eval.reach): at the first budget at or above it, or at
the first budget from which it stays at or above it at every later budget measured."""
RESETS = ("value_head", "critic", "policy_head", "normalizer")
"""`value_head`: the critic's last layer; `critic`: the whole critic network (the actor is
separate, so this is a fresh value function under the pretrained policy); `policy_head`: the
actor's last layer (the action mean) and the action log std; `normalizer`: the observation
statistics (re-estimated from the new task's first buffer)."""


@dataclass
class Procedure:
    """PPO settings that differ from the run's own (null: the run's value)."""

    optimizer: str | None = None
    """`adam` or `sgd`; null: the run's ppo.optimizer."""
    learning_rate: float | None = None
    """Learning rate (where a linear schedule starts); null: the run's ppo.learning_rate."""
    learning_rate_schedule: str | None = None
    """Adaptation only: `constant` or `linear` (from learning_rate to ML-Agents' floor over the
    adaptation's largest budget, as ppo.learning_rate_schedule decays over ppo.max_steps);
    null: constant."""
    buffer_size: int | None = None
    """Agent-steps per update; null: eval.buffer_size (pretraining: the run's ppo.buffer_size)."""
    log_std: float | None = None
    """Adaptation only: the start's action log std, set before adapting (0.0: a fresh policy's,
    so every start explores as scratch does); null: the start's own."""
    num_epoch: int | None = None
    """Passes over each buffer; null: the run's ppo.num_epoch."""
    batch_size: int | None = None
    """Minibatch size (at most the buffer); null: the run's ppo.batch_size."""
    reset: list[str] = field(default_factory=list)
    """Adaptation only: parts of the start re-initialised as a fresh policy has them before
    adapting: `value_head` (the critic's last layer), `critic` (all of the critic),
    `policy_head` (the actor's last layer and the action log std), `normalizer` (statistics
    re-estimated on the new task's first buffer).
    A scratch start is a fresh policy already; log_std, when set, applies after the resets."""

    def validate(self, where: str) -> None:
        """Raise ValueError naming the first invalid field."""
        for name in ("num_epoch", "batch_size", "learning_rate", "buffer_size"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{where}.{name} must be > 0, got {value}")
        unknown = [r for r in self.reset if r not in RESETS]
        if unknown:
            raise ValueError(f"{where}.reset: unknown reset {unknown[0]!r} (use some of {RESETS})")
        if len(set(self.reset)) != len(self.reset):
            raise ValueError(f"{where}.reset names a reset twice: {list(self.reset)}")
        for name, noun, choices in (
            ("optimizer", "optimizer", OPTIMIZERS),
            ("learning_rate_schedule", "schedule", SCHEDULES),
        ):
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise ValueError(f"{where}.{name}: unknown {noun} {value!r} (use one of {choices})")
        if self.log_std is not None and not math.isfinite(self.log_std):
            raise ValueError(f"{where}.log_std must be a finite number, got {self.log_std}")


@dataclass
class SearchConfig:
    """eval.search: each start's procedure found by a seeded Optuna (TPE) search on the
    selection split, the same number of trials for every start. An empty field is not
    searched (the run's value, or eval.buffer_size)."""

    trials: int = 8
    """Trials per start and family (every start, each joint pretraining included, gets these)."""
    seed: int = 0
    """Seed of the TPE samplers (each start and family has a sampler of its own from it)."""
    optimizer: list[str] = field(default_factory=list)
    """Optimizers to choose from (`adam`, `sgd`)."""
    learning_rate: list[float] = field(default_factory=list)
    """[low, high]: the learning rate, log-uniform (kept to 3 significant digits)."""
    learning_rate_schedule: list[str] = field(default_factory=lambda: ["constant"])
    """Learning-rate schedules to choose from (`constant`, `linear`); searched only with more
    than one choice, so the default [constant] proposes the trials it did before."""
    buffer_size: list[int] = field(default_factory=list)
    """Agent-steps per update to choose from."""
    num_epoch: list[int] = field(default_factory=list)
    """Passes over each buffer to choose from."""
    batch_size: list[int] = field(default_factory=list)
    """Minibatch sizes to choose from (at most the buffer)."""
    reset: list[list[str]] = field(default_factory=list)
    """Fine-tuning resets to choose from, each a list (`[]`: none; see Procedure.reset)."""
    run_first: bool = False
    """Every start's first trial is the run's own PPO settings (its optimizer, learning rate,
    buffer, epochs and minibatch, no reset, a constant learning rate), the same procedure for
    every start; each searched field's value must lie in the space."""

    def run_procedure(self, ppo: PPOConfig) -> dict[str, object]:
        """The first trial's parameters from the run's `ppo` (run_first); ValueError naming a
        value outside the space."""
        params: dict[str, object] = {}
        for name in PICKED:
            if getattr(self, name):
                value = getattr(ppo, name)
                if value not in getattr(self, name):
                    raise ValueError(
                        f"eval.search.run_first: the run's ppo.{name}={value!r} is not among "
                        f"eval.search.{name}={list(getattr(self, name))}"
                    )
                params[name] = value
        if self.learning_rate:
            low, high = self.learning_rate
            if not low <= ppo.learning_rate <= high:
                raise ValueError(
                    f"eval.search.run_first: the run's ppo.learning_rate={ppo.learning_rate:g} "
                    f"is outside eval.search.learning_rate=[{low:g}, {high:g}]"
                )
            params["learning_rate"] = ppo.learning_rate
        if self.reset:
            if [] not in [list(r) for r in self.reset]:
                raise ValueError(
                    "eval.search.run_first: the run's procedure resets nothing, so "
                    "eval.search.reset must list [] among its choices"
                )
            params["reset"] = []
        if self.learning_rate_schedule and "constant" not in self.learning_rate_schedule:
            raise ValueError(
                "eval.search.run_first: the run's procedure adapts at a constant learning rate, "
                "so eval.search.learning_rate_schedule must list constant among its choices"
            )
        if len(self.learning_rate_schedule) > 1:  # a single choice is not searched
            params["learning_rate_schedule"] = "constant"
        return params

    def validate(self) -> None:
        """Raise ValueError naming the first invalid eval.search field."""
        if self.trials < 1:
            raise ValueError(f"eval.search.trials must be >= 1, got {self.trials}")
        listed = (*PICKED, "learning_rate_schedule")
        searched = any(getattr(self, name) for name in (*PICKED, "reset"))
        if not self.learning_rate and not searched and len(self.learning_rate_schedule) < 2:
            raise ValueError(
                "eval.search declares an empty space: give choices for at least one of "
                "optimizer, learning_rate, buffer_size, num_epoch, batch_size, reset, "
                "learning_rate_schedule (two or more)"
            )
        if self.learning_rate:
            if len(self.learning_rate) != 2:
                raise ValueError(
                    f"eval.search.learning_rate is [low, high], got {list(self.learning_rate)}"
                )
            low, high = self.learning_rate
            if not 0 < low < high:
                raise ValueError(
                    f"eval.search.learning_rate needs 0 < low < high, got [{low}, {high}]"
                )
        for name in (*listed, "reset"):
            values = getattr(self, name)
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"eval.search.{name} lists a choice twice: {list(values)}")
        for name in listed:
            for i, value in enumerate(getattr(self, name)):
                Procedure(**{name: value}).validate(f"eval.search.{name}[{i}]")
        for i, reset in enumerate(self.reset):
            Procedure(reset=list(reset)).validate(f"eval.search.reset[{i}]")


@dataclass
class EvalConfig:
    """meta-eval: adaptation from the meta-learned start against baselines."""

    joint_run_id: str | None = None
    """Run id (in results_dir) of a `joint` baseline; null: meta-eval trains one into
    <run>/eval/joint per eval.joint_ppo entry, with the run's configuration and budget."""
    joint_ppo: list[Procedure] = field(default_factory=lambda: [Procedure()])
    """PPO settings the joint baseline is pretrained with, one baseline each (same env-step
    budget); the one whose start adapts best on the selection split is the joint start."""
    other_run_ids: list[str] = field(default_factory=list)
    """Runs of other meta-learners (e.g. meta=fomaml) on the run's configuration, one per
    meta-training seed of eval.run_ids; each is a start of its own, named by its algorithm."""
    adaptation: list[Procedure] = field(default_factory=lambda: [Procedure()])
    """Adaptation procedures; each start adapts with the one it does best with on the
    selection split. The default: the run's own procedure alone."""
    search: SearchConfig | None = None
    """A seeded search of each start's procedure instead of the eval.adaptation grid (null: the
    grid; eval=search: a small default space)."""
    selection_split: str = "train"
    """Tasks the procedures are chosen on: `train` (meta-eval's fresh training-distribution
    tasks) or `validation` (the same ranges, seeds of their own); never `test`."""
    budgets: list[int] = field(default_factory=lambda: [0, 1, 2, 5, 10, 20])
    """Adaptation budgets in PPO updates (of each procedure's buffer_size agent-steps); a
    procedure with smaller updates continues to the env steps of the largest size's last budget."""
    seeds: int = 5
    """Adaptation seeds per task and method."""
    tasks_per_family: int = 4
    """Tasks drawn per family and split."""
    stratify: bool = False
    """Draw each split's tasks in turn from its patches (each combination of the intervals its
    ranges are unions of, e.g. 3 × 3 hidden-goal patches), in an order shuffled per split, so
    that their task counts differ by at most one; false: each task uniform over the ranges."""
    splits: list[str] = field(default_factory=lambda: ["test", "train"])
    """Task splits reported: held-out `test` ranges, fresh samples of the `train` ranges, and
    `validation` (the train ranges, other seeds)."""
    buffer_size: int = 2048
    """Agent-steps per adaptation update, where a procedure does not set its own."""
    eval_episodes: int = 64
    """Episodes measured after each budget, without training."""
    deterministic: bool = True
    """Measure the mean action (true) or sampled actions (false)."""
    bootstrap_samples: int = 2000
    """Resamples of the stratified bootstrap confidence intervals."""
    confidence: float = 0.95
    """Level of the confidence intervals."""
    success_target: float = 0.8
    """Steps-to-80: the first budget whose success IQM (absolute) reaches this."""
    reach: str = "first"
    """When a curve has reached eval.success_target, for steps-to-80 everywhere (the tables,
    its intervals, the selection and the search): `first`, its first budget at or above it;
    `sustained`, the first budget from which it stays at or above it at every later budget."""
    run_ids: list[str] = field(default_factory=list)
    """Meta-training runs evaluated together, one per seed (configurations equal but for
    `seed`); each gets its own joint baseline. Empty: `run_id` alone."""
    workers: int = 1
    """Processes for adaptation jobs and joint baselines (spawned, 1 torch thread each);
    1: everything in this process. Results are the same for any number."""
    out_dir: str | None = None
    """Where the results go; null: <results_dir>/<run_id>/eval for one run, and
    <results_dir>/eval_<id>+<id>+... for several."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid eval.* field."""
        if not self.budgets:
            raise ValueError("eval.budgets is empty: give adaptation budgets in PPO updates")
        if any(b < 0 for b in self.budgets):
            raise ValueError(f"eval.budgets must be >= 0, got {list(self.budgets)}")
        for name in (
            "seeds",
            "tasks_per_family",
            "buffer_size",
            "eval_episodes",
            "bootstrap_samples",
            "workers",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"eval.{name} must be > 0, got {getattr(self, name)}")
        if not self.splits or any(s not in EVAL_SPLITS for s in self.splits):
            raise ValueError(
                f"eval.splits must name splits among {EVAL_SPLITS}, got {list(self.splits)}"
            )
        if self.selection_split not in SELECTION_SPLITS:
            raise ValueError(
                f"eval.selection_split must be one of {SELECTION_SPLITS} (tasks of the training "
                f"distribution, never test), got {self.selection_split!r}"
            )
        for name in ("adaptation", "joint_ppo"):
            entries = getattr(self, name)
            if not entries:
                raise ValueError(
                    f"eval.{name} is empty: give at least one entry ({{}}: the run's own)"
                )
            for i, entry in enumerate(entries):
                entry.validate(f"eval.{name}[{i}]")
            if len(set(map(repr, entries))) != len(entries):
                raise ValueError(f"eval.{name} lists an entry twice: {list(map(repr, entries))}")
        for i, entry in enumerate(self.joint_ppo):
            for name in ("log_std", "reset", "num_epoch", "batch_size", "learning_rate_schedule"):
                if getattr(entry, name) not in (None, []):
                    raise ValueError(
                        f"eval.joint_ppo[{i}].{name}: an adaptation setting, not a pretraining "
                        "one (pretraining takes optimizer, learning_rate, buffer_size)"
                    )
        if self.search is not None:
            if self.adaptation != [Procedure()]:
                raise ValueError(
                    "eval.search and eval.adaptation are alternatives: leave eval.adaptation at "
                    "its default (or eval.search null)"
                )
            self.search.validate()
        if self.joint_run_id and self.joint_ppo != [Procedure()]:
            raise ValueError(
                "eval.joint_run_id gives the joint baseline; eval.joint_ppo (which trains one per "
                "entry) must then be left at its default"
            )
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"eval.confidence must be in (0, 1), got {self.confidence}")
        if not 0.0 < self.success_target <= 1.0:
            raise ValueError(f"eval.success_target must be in (0, 1], got {self.success_target}")
        if self.reach not in REACHES:
            raise ValueError(f"eval.reach must be one of {REACHES}, got {self.reach!r}")
        if len(set(self.run_ids)) != len(self.run_ids):
            raise ValueError(f"eval.run_ids names a run twice: {list(self.run_ids)}")

    def update_sizes(self) -> list[int | None]:
        """The buffer sizes procedures may adapt with (None: eval.buffer_size)."""
        if self.search is not None:
            return list(self.search.buffer_size) or [None]
        return [p.buffer_size for p in self.adaptation]
