"""Optuna's sweeper, batch by batch on a stored study, failing the trials it leaves unfinished."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import optuna
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl
from omegaconf import DictConfig
from optuna.distributions import BaseDistribution
from optuna.trial import Trial, TrialState

from meta.run.signals import close_on_exit, exit_at_once
from meta.study import open_storage, shown

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class StudySweeperImpl(OptunaSweeperImpl):
    """`OptunaSweeperImpl.sweep` one batch at a time until the study has `n_trials` finished."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.asked: list[Trial] = []
        self.sampler_config: DictConfig | None = None
        self.where = "memory"
        """The storage as printed."""

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Optuna's set-up; the sampler's settings kept to seed it anew on a continued study."""
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.sampler_config = config.hydra.sweeper.sampler

    def sweep(self, arguments: list[str]) -> None:
        """Ask, run and tell batches of `n_jobs` trials until `n_trials` have finished."""
        study = self._open()
        target, asked = self.n_trials, 0
        _say(
            f"study {study.study_name} in {self.where}: {_finished(study)} of {target} "
            f"trials finished ({len(study.trials)} in all)"
        )
        close_on_exit(self._fail_unfinished)  # a signal that ends the process at once
        logging.getLogger(OptunaSweeperImpl.__module__).setLevel(logging.WARNING)  # per batch
        try:
            while (left := min(target - _finished(study), target - asked)) > 0:
                self.n_trials = min(left, self.n_jobs)
                exit_at_once("meta-train", f"interrupted between trials of {study.study_name}")
                asked += self.n_trials
                super().sweep(arguments)
        except BaseException:  # a trial's error or signal: its trial must not stay running
            self._fail_unfinished()
            raise
        finally:
            self.n_trials = target
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if complete and len(study.directions) == 1:
            best = study.best_trial
            tried = " ".join(f"{key}={value}" for key, value in best.params.items())
            name = study.study_name
            _say(f"study {name}: best objective {best.value} (trial {best.number}: {tried})")

    def _open(self) -> optuna.Study:
        """The study, created or continued; its sampler seeded anew if it has trials."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        directions = self._get_directions()
        if self.storage is None:  # in memory: the one storage for every batch of this run
            self.storage = optuna.storages.InMemoryStorage()
        else:
            url = open_storage(str(self.storage), self.study_name, directions)
            self.where = shown(url)
            self.storage = optuna.storages.get_storage(url)  # one connection for every batch
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            directions=directions,
            load_if_exists=True,
        )
        self.study_name = study.study_name
        config = self.sampler_config
        if study.trials and config is not None and config.get("seed") is not None:
            # the seed's stream again would propose the first trials again, run ids included
            self.sampler = instantiate(config, seed=int(config.seed) + len(study.trials))
        return study

    def _configure_trials(
        self,
        trials: list[Trial],
        search_space_distributions: dict[str, BaseDistribution],
        fixed_params: dict[str, Any],
    ) -> Sequence[Sequence[str]]:
        """Optuna's overrides of the batch; the trials kept until they are told."""
        self.asked = list(trials)
        overrides = super()._configure_trials(trials, search_space_distributions, fixed_params)
        for trial in trials:
            tried = " ".join(f"{key}={value}" for key, value in trial.params.items())
            _say(f"trial {trial.number} of study {trial.study.study_name}: {tried}")
        return overrides

    def _fail_unfinished(self) -> None:
        """Mark the asked trials still running as failed: they have no value."""
        for trial in self.asked:
            running = trial.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if trial.number in {t.number for t in running}:
                trial.study.tell(trial.number, state=TrialState.FAIL)
                _say(
                    f"trial {trial.number} did not finish: marked failed in study "
                    f"{trial.study.study_name} (the same command continues the study)"
                )
        self.asked = []


def _say(line: str) -> None:
    """A line of the search's progress, on meta-train's console (before any logging is set)."""
    print(f"meta-train: {line}", flush=True)


def _finished(study: optuna.Study) -> int:
    """How many of the study's trials have finished (completed or pruned), by any launcher."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))
