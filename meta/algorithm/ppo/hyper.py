"""The scheduled hyperparameters of one inner training: learning rate, beta and epsilon."""

from __future__ import annotations

from dataclasses import astuple, dataclass

from meta.config.ppo import PPOConfig

LEARNING_RATE_FLOOR = 1.0e-10
BETA_FLOOR = 1.0e-5
EPSILON_FLOOR = 0.1


def decayed(schedule: str, initial: float, floor: float, step: int, max_step: int) -> float:
    """ML-Agents' polynomial (power 1) decay from `initial` to `floor` over `max_step` steps."""
    if schedule == "constant":
        return initial
    if schedule != "linear":
        raise ValueError(f"unknown schedule {schedule!r} (use 'constant' or 'linear')")
    fraction = min(step, max_step) / max_step
    return (initial - floor) * (1.0 - fraction) + floor


@dataclass(frozen=True)
class Hyper:
    """Starting values of the scheduled hyperparameters for one training."""

    learning_rate: float
    beta: float
    epsilon: float

    @classmethod
    def of(cls, cfg: PPOConfig) -> Hyper:
        """The config's own values."""
        return cls(cfg.learning_rate, cfg.beta, cfg.epsilon)

    def after(self, cfg: PPOConfig, steps: int, budget: int) -> Hyper:
        """The values after `steps` of `budget` agent-steps, per the config's `*_schedule`s."""
        return Hyper(
            decayed(
                cfg.learning_rate_schedule, self.learning_rate, LEARNING_RATE_FLOOR, steps, budget
            ),
            decayed(cfg.beta_schedule, self.beta, BETA_FLOOR, steps, budget),
            decayed(cfg.epsilon_schedule, self.epsilon, EPSILON_FLOOR, steps, budget),
        )


@dataclass(frozen=True)
class RunSchedule:
    """One continuous training cut into chunks (`joint`, `single`): ML-Agents' linear decay over
    the whole run of `total` agent-steps, for a chunk that starts after `done` of them."""

    start: Hyper
    floors: Hyper
    done: int
    total: int

    def at(self, steps: int) -> Hyper:
        """The values after `steps` agent-steps of this chunk."""
        done, pairs = self.done + steps, zip(astuple(self.start), astuple(self.floors), strict=True)
        return Hyper(*(decayed("linear", x, floor, done, self.total) for x, floor in pairs))
