"""An adaptation procedure (or a joint pretraining's settings): the PPO settings that differ."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from meta.algorithm.resets import RESETS
from meta.config.ppo import OPTIMIZERS, SCHEDULES


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
