"""The sweeper of `hparams_search` (Hydra finds plugins in `hydra_plugins`; Optuna loads lazily)."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class StudySweeper(Sweeper):
    """Hydra's Optuna sweeper whose `n_trials` are the study's finished trials in all.

    Run again, the same command continues the stored study up to `n_trials` finished trials;
    a trial that does not return (a signal, a crash) is marked failed, never given a value.
    """

    def __init__(self, **settings: Any) -> None:
        from ._impl import StudySweeperImpl

        self.sweeper = StudySweeperImpl(**settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Set up Optuna's sweeper and keep the sampler's settings."""
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> None:
        """Run the search."""
        return self.sweeper.sweep(arguments)
