"""One training as a picklable request, and what it gives back: everything a training needs
and nothing of the process that runs it, so it gives the same result wherever it runs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from meta.algorithm.ppo.hyper import Hyper, RunSchedule
from meta.algorithm.ppo.weights import OptimizerState, Weights
from meta.algorithm.selfplay.ghost import SelfPlayState
from meta.config.ppo import NetworkConfig, PPOConfig

__all__ = ["OptimizerState", "SelfPlayState", "Task", "TrainRequest", "TrainResult"]


@dataclass(frozen=True)
class Task:
    """One sampled task: a family and its parameter values."""

    family: str
    params: dict[str, float]

    def with_params(self, params: Mapping[str, float]) -> Task:
        """The task with some parameters set (the curriculum's of a meta-step)."""
        return Task(self.family, {**self.params, **params})

    def params_json(self) -> str:
        """Parameters as a compact JSON object (one CSV cell)."""
        return json.dumps(self.params, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class TrainRequest:
    """One training from `weights`: tasks (several: joint's areas side by side) and settings."""

    tasks: tuple[Task, ...]
    weights: Weights | None
    """The start (θ for an inner training; requests sharing θ share this object), or None for
    a fresh policy initialised from `seed` (meta-eval's scratch start)."""
    seed: int
    ppo: PPOConfig
    network: NetworkConfig
    hyper: Hyper | None = None
    """Starting learning rate, beta and epsilon (None: the PPO settings' own)."""
    device: str = "cpu"
    schedule: RunSchedule | None = None
    """joint and single: the run's linear schedule this chunk follows (None: per training)."""
    optimizer_state: OptimizerState | None = None
    """Adam's state to continue (None: a fresh Adam)."""
    self_play_state: SelfPlayState | None = None
    """A game's self-play state: the run's ELO and, to continue one, the ghost."""
    returns_optimizer: bool = False
    """Whether the result keeps Adam's state (only a chain of trainings needs it back)."""
    meta_gradient: bool = False
    """Also measure PPO's gradient at the trained weights on one fresh buffer (FOMAML)."""
    updates: int | None = None
    """Stop after this many updates, whatever the agent count (None: at ppo.max_steps)."""
    log_std: float | None = None
    """Set the start's action log std to this before training (None: the start's own)."""
    reset: tuple[str, ...] = ()
    """Parts of the start re-initialised as a fresh policy from `seed` has them, before
    `log_std` applies (meta.algorithm.resets.RESETS)."""
    snapshots: tuple[int, ...] = ()
    """Updates after which the result keeps the weights (0: the start), as meta-eval measures."""

    def carrying(self, **state: Any) -> TrainRequest:
        """The same request continuing from the state a previous training left."""
        return replace(self, **state)


@dataclass
class TrainResult:
    """What one training produced."""

    weights: Weights
    stats: dict[str, float]
    updates: list[dict[str, float]] = field(default_factory=list)
    optimizer_state: OptimizerState | None = None
    """Adam's state after the training, to continue it in the next one."""
    self_play_state: SelfPlayState | None = None
    """The run's ELO after the training and, for a game, the ghost to continue it with."""
    meta_gradient: Weights | None = None
    """The gradient of PPO's loss at the trained weights on a fresh buffer (if asked for)."""
    snapshots: dict[int, Weights] = field(default_factory=dict)
    """The weights after each update the request named in its `snapshots`."""
