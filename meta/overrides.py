"""What a meta-train command's overrides mean: the run ids they derive, the configuration they
leave in force on resume, and the runs of a group of seeds (`seeds=[...]`).

Read from Hydra's composition inside a task function (HydraConfig is set); nothing here writes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from meta.algorithm.registry import validate
from meta.config import Config
from meta.config.runtime import check_seeds
from meta.run.names import check_name, derived_run_id, override_key, seed_overrides

if TYPE_CHECKING:
    from meta.trainer.session import Start

log = logging.getLogger("meta")
MULTIRUN_SEEDS = (
    "seeds=[...] trains its runs in one process and does not combine with --multirun "
    "(drop -m, or sweep seed=0,1,2 with -m)"
)


def run_id_of(cfg: DictConfig) -> str:
    """The given run_id, else one derived from the overrides (distinct per multirun job).

    The derived id is `meta.run.names.derived_run_id` of the overrides Hydra's
    `override_dirname` keeps. A resume whose derived id has no directory but whose id by the
    earlier rule (`<algorithm>_<override_dirname>`) has one continues that run.
    """
    if cfg.run_id:
        return check_name(str(cfg.run_id))
    hydra_cfg = HydraConfig.get()
    run_id = _derived(cfg, hydra_cfg.overrides.task)
    legacy = _legacy_run_id(str(cfg.meta.algorithm), hydra_cfg.job.override_dirname)
    results = Path(str(cfg.results_dir))
    if cfg.resume and not (results / run_id).exists() and (results / legacy).is_dir():
        log.info("Resuming %r, the id this run was given before run ids changed", legacy)
        return check_name(legacy)
    return check_name(run_id)


def _derived(cfg: DictConfig, overrides: Iterable[str]) -> str:
    """The run id derived from `overrides`: those Hydra's `override_dirname` keeps."""
    excluded = set(HydraConfig.get().job.config.override_dirname.exclude_keys)
    kept = [o for o in overrides if override_key(o) not in excluded]
    return derived_run_id(str(cfg.meta.algorithm), kept)


def seed_run_id(cfg: DictConfig, overrides: list[str], seed: int) -> str:
    """The id of the run of `seed` in a group: `<run_id>-seed_<seed>` for a given run_id, else
    the id `seed=<seed>` with the group's other overrides derives."""
    if cfg.run_id:
        return check_name(f"{cfg.run_id}-seed_{seed}")
    return check_name(_derived(cfg, seed_overrides(overrides, seed)))


def _legacy_run_id(algorithm: str, override_dirname: str) -> str:
    """The id derived before run ids became Hydra values: `<algorithm>_<override_dirname>`."""
    name = algorithm + (f"_{override_dirname}" if override_dirname else "")
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "-", name)


def group_starts(cfg: DictConfig) -> list[Start]:
    """Every run of `seeds=[...]`, planned as `seed=<s>` alone plans it; ValueError naming the
    first that cannot run (the ones planned before it are closed: nothing is started)."""
    overrides = list(HydraConfig.get().overrides.task)
    _check_group(cfg, overrides)
    starts: list[Start] = []
    try:
        for seed in cfg.seeds:
            starts.append(_seed_start(cfg, overrides, int(seed)))
    except BaseException:
        for start in starts:
            start.plan.close()
        raise
    return starts


def _check_group(cfg: DictConfig, overrides: list[str]) -> None:
    """Refuse a group of seeds that cannot run as one, before anything is planned."""
    seeds = [int(s) for s in cfg.seeds]
    given = "seeds=[" + ",".join(str(s) for s in seeds) + "]"
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        raise ValueError(MULTIRUN_SEEDS)
    if "seed" in {override_key(o) for o in overrides}:
        raise ValueError(f"{given} gives each run its own seed, and seed= another: leave seed= out")
    check_seeds(seeds)


def _seed_start(cfg: DictConfig, overrides: list[str], seed: int) -> Start:
    """The run of `seed` in a group, planned as `seed=<seed>` alone plans it."""
    mine = seed_overrides(overrides, seed)
    alone = OmegaConf.merge(cfg, {"seed": seed, "seeds": None})
    return run_start(alone, seed_run_id(cfg, overrides, seed), mine)  # type: ignore[arg-type]


def run_start(cfg: DictConfig, run_id: str, overrides: list[str] | None = None) -> Start:
    """The run `cfg` configures, planned: its configuration in force (`overrides`: as
    `in_force` takes them), validated before torch is imported; ValueError, OSError or
    RuntimeError for input that cannot run, nothing written."""
    cfg, changes = in_force(cfg, run_id, overrides)
    config: Config = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    validate(config)
    from meta.trainer import plan_training, session

    set_torch(config)
    plan = plan_training(config, run_id)
    resolved = {str(k): v for k, v in OmegaConf.to_container(cfg, resolve=True).items()}  # type: ignore[union-attr]
    resolved["run_id"] = run_id
    return session.Start(plan, OmegaConf.to_yaml(resolved), resolved, changes)


def in_force(
    cfg: DictConfig, run_id: str, overrides: list[str] | None = None
) -> tuple[DictConfig, dict[str, tuple[Any, Any]]]:
    """The configuration to run: on resume the run's own, with the changes it may take
    (`overrides`: what the command line set, Hydra's task overrides by default)."""
    if not cfg.resume:
        return cfg, {}
    from meta.config.retired import upgraded
    from meta.run.configuration import reconcile
    from meta.run.directory import CONFIG_FILE

    path = Path(str(cfg.results_dir)) / run_id / CONFIG_FILE
    if not path.is_file():
        return cfg, {}  # the run directory rules name what is missing
    saved = upgraded(OmegaConf.to_container(OmegaConf.load(path), resolve=True))  # type: ignore[arg-type]
    given = OmegaConf.to_container(cfg, resolve=True)
    if overrides is None:
        overrides = list(HydraConfig.get().overrides.task)
    merged, changes = reconcile(saved, given, _touched(overrides))  # type: ignore[arg-type]
    merged.update(run_id=run_id, resume=True, force=False, results_dir=cfg.results_dir)
    merged.pop("hydra", None)
    schema = OmegaConf.structured(Config)
    return OmegaConf.merge(schema, merged), changes  # type: ignore[return-value]


def _touched(overrides: list[str]) -> set[str]:
    """Config keys the overrides set: named ones, and those a group or experiment changes."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from meta.run.configuration import flatten

    mine = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    parsed = OverridesParser.create().parse_overrides(mine)
    keys = {o.key_or_group.replace("/", ".") for o in parsed}
    base = flatten(OmegaConf.to_container(compose("config"), resolve=True))  # type: ignore[arg-type]
    full = flatten(OmegaConf.to_container(compose("config", mine), resolve=True))  # type: ignore[arg-type]
    return keys | {key for key, value in full.items() if base.get(key) != value}


def set_torch(config: Config) -> None:
    """torch's intra-op threads as `torch_threads` says (0: torch's own number) and its float32
    matmul precision as `torch_matmul_precision` does, for this process and the workers it
    starts (which take the precision it has when they start)."""
    import torch

    from meta.process.compute import set_matmul_precision

    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)
    set_matmul_precision(config.torch_matmul_precision)
