"""The sweeper's and the samplers' settings: `hydra/sweeper=optuna`, `hydra/sweeper/sampler=tpe`.

Hydra imports this module when it scans `hydra_plugins`, and the settings go into its
ConfigStore under the names Hydra's own Optuna sweeper used, so that `hparams_search` files
written for it (lightning-hydra-template's) compose unchanged. Optuna is not imported here,
nor `from __future__ import annotations`: Hydra runs the module outside sys.modules, where
dataclasses cannot resolve annotations given as strings.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

PROVIDER = "meta_harness_sweeper"


@dataclass
class SamplerConf:
    """An Optuna sampler, by its class; `seed` seeds it."""

    _target_: str = MISSING
    seed: int | None = None


@dataclass
class TPESamplerConf(SamplerConf):
    """optuna.samplers.TPESampler."""

    _target_: str = "optuna.samplers.TPESampler"
    n_startup_trials: int = 10
    n_ei_candidates: int = 24
    multivariate: bool | None = None
    """None: Optuna's default."""
    group: bool = False
    constant_liar: bool = True


@dataclass
class RandomSamplerConf(SamplerConf):
    """optuna.samplers.RandomSampler."""

    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class QMCSamplerConf(SamplerConf):
    """optuna.samplers.QMCSampler."""

    _target_: str = "optuna.samplers.QMCSampler"
    qmc_type: str = "sobol"
    scramble: bool = False


@dataclass
class NSGAIISamplerConf(SamplerConf):
    """optuna.samplers.NSGAIISampler."""

    _target_: str = "optuna.samplers.NSGAIISampler"
    population_size: int = 50
    mutation_prob: float | None = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass
class CmaEsSamplerConf(SamplerConf):
    """optuna.samplers.CmaEsSampler (needs the `cmaes` package)."""

    _target_: str = "optuna.samplers.CmaEsSampler"
    sigma0: float | None = None
    n_startup_trials: int = 1
    restart_strategy: str | None = None
    use_separable_cma: bool = False


@dataclass
class GridSamplerConf(SamplerConf):
    """optuna.samplers.GridSampler: every combination of the space's choices and ranges."""

    _target_: str = "optuna.samplers.GridSampler"
    _partial_: bool = True


@dataclass
class StudySweeperConf:
    """`hydra.sweeper`: an Optuna study, stored, run to `n_trials` finished trials."""

    _target_: str = "hydra_plugins.meta_harness_sweeper.study_sweeper.StudySweeper"
    _recursive_: bool = False
    """The sampler is made when the study is opened, with the seed a continued study needs."""
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: SamplerConf = MISSING
    direction: Any = "minimize"
    """`minimize`, `maximize`, or a list of them for several objectives."""
    storage: str | None = None
    """An SQLAlchemy URL; None keeps the study in memory."""
    study_name: str | None = None
    n_trials: int = 20
    """The study's finished trials to reach, counting those it already holds."""
    n_jobs: int = 2
    """Trials handed to the launcher at once."""
    max_failure_rate: float = 0.0
    """The share of a batch's trials that may fail before the search stops."""
    params: dict[str, Any] | None = None
    """The search space: a key and its values in Hydra's override grammar each."""
    custom_search_space: str | None = None
    """A function `(cfg, trial)` that suggests more parameters, by its import path."""


def register() -> None:
    """Put the sweeper and the samplers into Hydra's ConfigStore."""
    store = ConfigStore.instance()
    store.store(group="hydra/sweeper", name="optuna", node=StudySweeperConf, provider=PROVIDER)
    samplers: dict[str, type[SamplerConf]] = {
        "tpe": TPESamplerConf,
        "random": RandomSamplerConf,
        "qmc": QMCSamplerConf,
        "nsgaii": NSGAIISamplerConf,
        "cmaes": CmaEsSamplerConf,
        "grid": GridSamplerConf,
    }
    for name, node in samplers.items():
        store.store(group="hydra/sweeper/sampler", name=name, node=node, provider=PROVIDER)


register()
