"""The sweeper of `hparams_search` (Hydra finds plugins in `hydra_plugins`; Optuna loads lazily)."""

from __future__ import annotations

import importlib.util
from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

OLD_PLUGIN = "hydra_plugins.hydra_optuna_sweeper"


class StudySweeper(Sweeper):
    """An Optuna search whose `n_trials` are the study's finished trials in all.

    Run again, the same command continues the stored study up to `n_trials` finished trials;
    a trial that does not return (a signal, a crash) is marked failed, never given a value.
    """

    def __init__(self, **settings: Any) -> None:
        if importlib.util.find_spec(OLD_PLUGIN) is not None:
            from meta.cli import fail

            fail(
                "meta-train",
                "hydra-optuna-sweeper is installed beside the project's sweeper and may take "
                "hydra/sweeper=optuna from it: pip uninstall hydra-optuna-sweeper",
            )
        from ._impl import StudySweeperImpl

        self.sweeper = StudySweeperImpl(**settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Set up the launcher of the trials."""
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> None:
        """Run the search."""
        return self.sweeper.sweep(arguments)
