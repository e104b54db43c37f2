"""The search: batches of Optuna trials on a stored study, each batch run by Hydra's launcher.

Everything the search is given is checked before a trial starts and before the storage is
touched: the space (`_space.py`), each of its keys and values against the configuration, the
storage and the study stored in it (`meta.study`). A trial that does not return a value is
failed in the study, never given one.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from hydra.utils import get_method, instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import StudyDirection
from optuna.trial import Trial, TrialState

from meta.cli import CONFIG_DIR
from meta.errors import fail, first_line, one_line
from meta.process.atomic import atomic_write_text
from meta.process.signals import close_on_exit, exit_at_once
from meta.study import directions_of, open_storage, rdb_storage, shown
from meta.usage import config_keys, did_you_mean

from ._space import SearchSpace, search_space
from ._together import launch_together, trains_together

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
RESULTS_FILE = "optimization_results.yaml"


class StudySweeperImpl:
    """Ask, run and tell batches of `n_jobs` trials until the study has `n_trials` finished."""

    def __init__(
        self,
        *,
        sampler: DictConfig,
        direction: Any,
        storage: str | None,
        study_name: str | None,
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        params: DictConfig | None,
        custom_search_space: str | None,
    ) -> None:
        self.sampler_config = sampler
        given = OmegaConf.to_object(direction) if OmegaConf.is_config(direction) else direction
        self.directions = directions_of(given)
        self.storage = storage
        self.study_name = study_name
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.max_failure_rate = max_failure_rate
        self.params = {} if params is None else {str(k): str(v) for k, v in params.items()}
        self.extend = get_method(custom_search_space) if custom_search_space else None
        self.asked: list[Trial] = []
        self.job_idx = 0
        self.where = "memory"
        """The storage as printed."""

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Hydra's launcher for the trials."""
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )
        self.together = trains_together(config)
        """Whether each batch trains as one group in this process (the basic launcher)."""

    def sweep(self, arguments: list[str]) -> None:
        """Check the search, then run batches until the study has `n_trials` finished trials."""
        try:
            space = self._space(arguments)
            self._check_values(space)
            study = self._open(space)
        except ValueError as error:
            fail("meta-train", error)
        target = self.n_trials
        if self.sampler_config.get("_partial_"):  # the grid: no more trials than settings
            target = min(target, space.size())
        name = study.study_name
        _say(
            f"study {name} in {self.where}: {_finished(study)} of {target} trials finished "
            f"({len(study.trials)} in all)"
        )
        close_on_exit(self._fail_unfinished)  # a signal that ends the process at once
        asked = 0
        try:
            while (left := min(target - _finished(study), target - asked)) > 0:
                exit_at_once("meta-train", f"interrupted between trials of {name}")
                batch = min(left, self.n_jobs)
                asked += batch
                self._run_batch(study, space, batch)
        except BaseException:  # a trial's error or signal: its trial must not stay running
            self._fail_unfinished()
            raise
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if complete and len(self.directions) == 1:
            best = study.best_trial
            tried = _tried(best.params)
            _say(f"study {name}: best objective {best.value} (trial {best.number}: {tried})")

    def _space(self, arguments: list[str]) -> SearchSpace:
        """`hydra.sweeper.params` and then the command line's overrides, as one space."""
        entries = [
            (f"hydra.sweeper.params.{key}", f"{key}={value}") for key, value in self.params.items()
        ]
        entries += [("the command line", argument) for argument in arguments]
        space = search_space(entries)
        if not space.distributions and self.extend is None:
            raise ValueError("hydra.sweeper.params: the search space is empty")
        return space

    def _check_values(self, space: SearchSpace) -> None:
        """ValueError unless every key of the space, with each of its extreme values, composes."""
        for overrides in space.corners():
            try:
                self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            except Exception as error:  # Hydra's and OmegaConf's many errors: all are the space
                hint = did_you_mean(error, CONFIG_DIR, config_keys(self.config))
                raise ValueError(f"hydra.sweeper.params: {one_line(error)}{hint}") from None

    def _open(self, space: SearchSpace) -> optuna.Study:
        """The study, created or continued; its sampler seeded anew if it has trials."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = self._sampler(space, 0)  # a sampler that cannot be made changes nothing
        if self.storage is None:
            self.where = "memory"
            storage: optuna.storages.BaseStorage = optuna.storages.InMemoryStorage()
        else:
            url = open_storage(str(self.storage), self.study_name, self.directions)
            self.where = shown(url)
            storage = rdb_storage(url)  # one engine for every batch
        study = optuna.create_study(
            study_name=self.study_name,
            storage=storage,
            directions=[StudyDirection[d.upper()] for d in self.directions],
            sampler=sampler,
            load_if_exists=True,
        )
        if study.trials:
            study.sampler = self._sampler(space, len(study.trials))
        return study

    def _sampler(self, space: SearchSpace, trials: int) -> optuna.samplers.BaseSampler:
        """The configured sampler, seeded from its seed and the `trials` the study holds."""
        seed = self.sampler_config.get("seed")
        given = {} if seed is None else {"seed": continued_seed(int(seed), trials)}
        try:
            sampler = instantiate(self.sampler_config, **given)
            if isinstance(sampler, functools.partial):  # the grid, which takes the space
                sampler = sampler(space.grid())
        except ValueError:
            raise
        except Exception as error:  # an unknown sampler or setting, a missing package
            raise ValueError(f"hydra.sweeper.sampler: {one_line(error)}") from None
        assert isinstance(sampler, optuna.samplers.BaseSampler)
        return sampler

    def _run_batch(self, study: optuna.Study, space: SearchSpace, size: int) -> None:
        """Ask `size` trials, run them on the launcher, tell the study what each returned."""
        self.asked = [study.ask() for _ in range(size)]
        overrides = [self._overrides(trial, space) for trial in self.asked]
        for trial in self.asked:
            _say(f"trial {trial.number} of study {study.study_name}: {_tried(trial.params)}")
        if self.together:
            labels = [f"trial {trial.number}" for trial in self.asked]
            returns = launch_together(
                self.hydra_context, self.config, overrides, self.job_idx, labels
            )
        else:
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
        self.job_idx += len(returns)
        failures = []
        for trial, returned in zip(self.asked, returns, strict=True):
            try:
                study.tell(trial, self._values(returned))
            except Exception as error:  # the job's own error, or a value that is not one
                study.tell(trial, state=TrialState.FAIL)
                _say(f"trial {trial.number} failed: {first_line(error)}")
                failures.append(error)
        self.asked = []
        self._write_results(study)
        if failures and len(failures) / len(returns) > self.max_failure_rate:
            fail(
                "meta-train",
                f"{len(failures)} of {len(returns)} trials of the batch failed "
                f"(hydra.sweeper.max_failure_rate={self.max_failure_rate})",
                1,
            )

    def _overrides(self, trial: Trial, space: SearchSpace) -> list[str]:
        """The trial's overrides: sampled values, then the fixed ones."""
        for key, distribution in space.distributions.items():
            _suggest(trial, key, distribution)
        for key, value in space.fixed.items():
            trial.set_user_attr(key, value)
        if self.extend is not None:
            self.extend(self.config, trial)
        sampled = {key: value for key, value in trial.params.items() if key not in space.fixed}
        return [f"{key}={value}" for key, value in {**sampled, **space.fixed}.items()]

    def _values(self, returned: JobReturn) -> list[float]:
        """The objective values a trial returned (its error raised)."""
        value = returned.return_value
        values = list(value) if isinstance(value, Sequence) else [value]
        if len(values) != len(self.directions) or any(v is None for v in values):
            raise ValueError(
                f"it returned {value!r}, not {len(self.directions)} objective value(s) "
                "(is optimized_metric set?)"
            )
        return [float(v) for v in values]

    def _write_results(self, study: optuna.Study) -> None:
        """`optimization_results.yaml` in the sweep's folder: the best setting so far."""
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not complete:
            return
        results: dict[str, Any] = {"name": "optuna"}
        if len(self.directions) == 1:
            results.update(best_params=study.best_trial.params, best_value=study.best_value)
        else:
            results["solutions"] = [
                {"params": t.params, "values": t.values} for t in study.best_trials
            ]
        path = f"{self.config.hydra.sweep.dir}/{RESULTS_FILE}"
        atomic_write_text(path, OmegaConf.to_yaml(OmegaConf.create(results)))

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


def continued_seed(seed: int, trials: int) -> int:
    """The sampler's seed on a study holding `trials` trials: `seed` on a new one.

    Its stream again would propose the first trials again, run ids included; and launchers
    given seeds 0 and 1 must not meet on one seed when they join the study one trial apart.
    """
    if trials == 0:
        return seed
    return int(np.random.SeedSequence([seed, trials]).generate_state(1)[0])


def _suggest(trial: Trial, key: str, distribution: BaseDistribution) -> None:
    """Have the trial sample `key` from `distribution`, through Optuna's public suggest API."""
    if isinstance(distribution, CategoricalDistribution):
        trial.suggest_categorical(key, distribution.choices)
    elif isinstance(distribution, IntDistribution):
        trial.suggest_int(
            key, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    elif isinstance(distribution, FloatDistribution):
        trial.suggest_float(
            key, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )


def _tried(params: dict[str, Any]) -> str:
    """A trial's values as `key=value ...`."""
    return " ".join(f"{key}={value}" for key, value in params.items())


def _say(line: str) -> None:
    """A line of the search's progress, on meta-train's console (before any logging is set)."""
    print(f"meta-train: {line}", flush=True)


def _finished(study: optuna.Study) -> int:
    """How many of the study's trials have finished (completed or pruned), by any launcher."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))
