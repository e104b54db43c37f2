"""Hydra entry points (thin): compose, convert to plain dataclasses once, hand to the library."""

from __future__ import annotations

import logging
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from meta.config import Config
from meta.errors import one_line
from meta.run.interrupt import Terminated, raise_on_signals
from meta.run.names import check_name, command, derived_run_id, run_command
from meta.run.signals import exit_at_once, exit_code, forget_interrupt
from meta.usage import HELP_FLAGS, did_you_mean, eval_argv, wrapped_help

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")
log = logging.getLogger("meta")
VERBOSE = False


def _hydra_verbose() -> bool:
    """Whether `hydra.verbose` was set for this run."""
    return HydraConfig.initialized() and bool(HydraConfig.get().verbose)


def register_configs() -> None:
    """Register the schema so Hydra rejects unknown keys and wrong types."""
    ConfigStore.instance().store(name="base_config", node=Config)


def fail(program: str, error: BaseException | str, code: int = 2) -> None:
    """Print `program: error: ...` on one line and exit non-zero (the traceback too if verbose)."""
    if (VERBOSE or _hydra_verbose()) and sys.exc_info()[0] is not None:
        traceback.print_exc()
    message = error if isinstance(error, str) else one_line(error)
    print(f"{program}: error: {message}", file=sys.stderr)
    forget_interrupt()
    raise SystemExit(code)


def precheck(program: str, argv: list[str]) -> None:
    """Compose the overrides once before Hydra runs, so bad keys and types fail in one line."""
    if any(arg.startswith("-") for arg in argv):
        return  # --multirun, --help, --cfg ...: Hydra's own handling
    from hydra import compose, initialize_config_dir

    overrides = [a for a in argv if not a.lstrip("+~").startswith("hydra")]
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
            config: Config = OmegaConf.to_object(cfg)  # type: ignore[assignment]
            sweeper = None
            if program == "meta-train" and config.optimized_metric:  # a search's trials
                hydra_cfg = compose("config", argv, return_hydra_config=True).hydra
                sweeper = OmegaConf.to_container(hydra_cfg.sweeper, resolve=True)
    except Exception as error:  # Hydra and OmegaConf raise many kinds; all are user input
        fail(program, one_line(error) + did_you_mean(error, CONFIG_DIR))
    if sweeper is not None:  # a search's objective and study, checked before the sweeper writes
        from meta.study import check_search

        try:
            check_search(config, sweeper)  # type: ignore[arg-type]
        except ValueError as error:
            fail("meta-train", error)


def run_id_of(cfg: DictConfig) -> str:
    """The given run_id, else one derived from the overrides (distinct per multirun job).

    The derived id is `meta.run.names.derived_run_id` of the overrides Hydra's
    `override_dirname` keeps. A resume whose derived id has no directory but whose id by the
    earlier rule (`<algorithm>_<override_dirname>`) has one continues that run.
    """
    if cfg.run_id:
        return check_name(str(cfg.run_id))
    hydra_cfg = HydraConfig.get()
    excluded = set(hydra_cfg.job.config.override_dirname.exclude_keys)
    kept = [o for o in hydra_cfg.overrides.task if o.split("=")[0].lstrip("+~") not in excluded]
    run_id = derived_run_id(str(cfg.meta.algorithm), kept)
    legacy = _legacy_run_id(str(cfg.meta.algorithm), hydra_cfg.job.override_dirname)
    results = Path(str(cfg.results_dir))
    if cfg.resume and not (results / run_id).exists() and (results / legacy).is_dir():
        log.info("Resuming %r, the id this run was given before run ids changed", legacy)
        return check_name(legacy)
    return check_name(run_id)


def _legacy_run_id(algorithm: str, override_dirname: str) -> str:
    """The id derived before run ids became Hydra values: `<algorithm>_<override_dirname>`."""
    name = algorithm + (f"_{override_dirname}" if override_dirname else "")
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "-", name)


def _train(cfg: DictConfig) -> float | None:
    from meta.launch import BEFORE_START
    from meta.observe.console import log_to, run_console

    exit_at_once("meta-train", BEFORE_START)  # again for each job of a multirun
    console = run_console()
    log_to(console)
    try:
        run_id = run_id_of(cfg)
        cfg, changes = _in_force(cfg, run_id)
        config: Config = OmegaConf.to_object(cfg)  # type: ignore[assignment]
        config.validate()  # before torch is imported: a bad value fails in a moment
        from meta.trainer import plan_training, session

        _set_threads(config)
        checked = plan_training(config, run_id)
    except (ValueError, OSError, RuntimeError) as error:  # the input, and nothing written yet
        fail("meta-train", error)
    resolved = {str(k): v for k, v in OmegaConf.to_container(cfg, resolve=True).items()}  # type: ignore[union-attr]
    resolved["run_id"] = run_id
    try:
        run_dir = session.run(checked, OmegaConf.to_yaml(resolved), resolved, console, changes)
    except session.Stopped as stopped:
        fail("meta-train", str(stopped), stopped.code)
    print(
        f"meta-train: done. Results in {run_dir} (final weights {run_dir / 'Brain.pt'}; "
        f"meta-steps in {run_dir / 'meta_steps.csv'}). Watch it with: "
        f"{command('tensorboard', '--logdir', str(run_dir))}. Evaluate it with: "
        f"{run_command('meta-eval', run_id, str(cfg.results_dir))}"
    )
    from meta.evaluation.metric import OBJECTIVE_FILE, describe
    from meta.evaluation.objective import measure_objective

    value = measure_objective(config, run_dir)  # what a search (hparams_search) optimises
    if value is not None:
        metric = str(config.optimized_metric)
        print(
            f"meta-train: objective {metric} = {value:.3f}: {describe(metric)} ({OBJECTIVE_FILE})"
        )
    return value


def _in_force(cfg: DictConfig, run_id: str) -> tuple[DictConfig, dict[str, tuple[Any, Any]]]:
    """The configuration to run: on resume the run's own, with the changes it may take."""
    if not cfg.resume:
        return cfg, {}
    from meta.run.configuration import reconcile
    from meta.run.directory import CONFIG_FILE

    path = Path(str(cfg.results_dir)) / run_id / CONFIG_FILE
    if not path.is_file():
        return cfg, {}  # the run directory rules name what is missing
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    given = OmegaConf.to_container(cfg, resolve=True)
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


def _set_threads(config: Config) -> None:
    import torch

    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)


def _hydra(task: Any) -> Any:
    return hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")(task)


def train_main() -> None:
    """`meta-train [--verbose] [overrides]`."""
    from meta.launch import BEFORE_START

    exit_at_once("meta-train", BEFORE_START)
    _take_verbose()
    register_configs()
    precheck("meta-train", sys.argv[1:])
    _run(_hydra(_train), "meta-train")


def _take_verbose() -> None:
    """`--verbose` (ours, not Hydra's): print the traceback of an error before its line."""
    global VERBOSE
    if "--verbose" in sys.argv[1:]:
        sys.argv.remove("--verbose")
        VERBOSE = True


EVAL_KEYS = (
    "run_id",
    "results_dir",
    "seed",
    "torch_device",
    "torch_threads",
    "eval",
    "runtime",
    "hydra",
)


def _eval(cfg: DictConfig) -> None:
    try:
        config: Config = OmegaConf.to_object(cfg)  # type: ignore[assignment]
        config.eval.validate()  # before torch is imported: a bad value fails in a moment
        config.runtime.validate()
        from meta.evaluation.evaluate import evaluate, plan_eval
        from meta.evaluation.table import table

        _set_threads(config)
        checked = plan_eval(config, config.run_id)
    except Exception as error:  # all of it is about the input; nothing is written yet
        fail("meta-eval", error)
    raise_on_signals()
    try:
        cells = evaluate(checked, progress=True)
    except (KeyboardInterrupt, Terminated) as error:
        code = exit_code(signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)
        exit_at_once("meta-eval", "interrupted before writing results")
        fail("meta-eval", "interrupted before writing results; run it again to start over", code)
    exit_at_once("meta-eval", f"interrupted after writing results; {checked.out_dir} is complete")
    from rich.console import Console

    width = Console().width  # the terminal's; 80 (or $COLUMNS) in a pipe
    print(table(cells, config.eval.success_target, config.eval.confidence, width))
    print(f"meta-eval: done. Results in {checked.out_dir} (selection.csv, steps_to_80.csv, ...)")


HYDRA_VALUED_FLAGS = (
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--info",
    "-i",
)
"""Hydra's flags that take the next argument as their value (`--cfg job`)."""


def _overrides(argv: list[str]) -> list[str]:
    """The overrides among `argv`: neither Hydra's flags nor their values."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg.startswith("-"):
            skip = arg in HYDRA_VALUED_FLAGS
            continue
        kept.append(arg)
    return kept


def eval_main() -> None:
    """`meta-eval run_id=<run> [eval.* seed=... results_dir=...]`."""
    exit_at_once("meta-eval", "interrupted before writing results; nothing was written")
    register_configs()
    for arg in _overrides(sys.argv[1:]):
        key = arg.lstrip("+~").split("=")[0].split(".")[0]
        if key not in EVAL_KEYS:
            fail(
                "meta-eval",
                f"{arg}: the run's configuration.yaml decides {key}.*; "
                f"meta-eval takes {', '.join(EVAL_KEYS[:-1])}.* overrides",
            )
    precheck("meta-eval", sys.argv[1:])
    sys.argv[1:] = eval_argv(sys.argv[1:])
    _run(_hydra(_eval), "meta-eval")


def _run(main: Any, program: str) -> None:
    """Hydra's main; a help screen is folded to the terminal's width, bad overrides one line."""
    if any(arg in HELP_FLAGS for arg in sys.argv[1:]):
        try:
            wrapped_help(main, CONFIG_DIR)
        except Exception as error:  # the overrides before --help: Hydra's and OmegaConf's errors
            fail(program, one_line(error) + did_you_mean(error, CONFIG_DIR))
    else:
        main()
