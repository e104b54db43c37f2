"""Hydra entry points (thin): compose, convert to plain dataclasses once, hand to the library."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from meta import errors
from meta.config import Config, retired
from meta.config.runtime import check_matmul_precision
from meta.errors import fail, one_line
from meta.overrides import MULTIRUN_SEEDS, group_starts, run_id_of, run_start, set_torch
from meta.process.signals import (
    BEFORE_START,
    Terminated,
    exit_at_once,
    exit_code,
    raise_on_signals,
)
from meta.run.names import (
    DEFAULT_RESULTS_DIR,
    command,
    hydra_value,
    override_key,
    run_command,
)
from meta.usage import HELP_FLAGS, did_you_mean, eval_argv, wrapped_help

if TYPE_CHECKING:
    from meta.trainer.session import Start

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def register_configs() -> None:
    """Register the schema so Hydra rejects unknown keys and wrong types."""
    ConfigStore.instance().store(name="base_config", node=Config)


def precheck(program: str, argv: list[str]) -> None:
    """Compose the overrides once before Hydra runs, so bad keys and types fail in one line."""
    if gone := retired.in_overrides(_overrides(argv)):
        fail(program, gone)
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
        fail(program, retired.in_error(error) or one_line(error) + did_you_mean(error, CONFIG_DIR))
    if sweeper is not None:  # a search's objective and study, checked before the sweeper writes
        from meta.study import check_search

        try:
            check_search(config, sweeper)  # type: ignore[arg-type]
        except ValueError as error:
            fail("meta-train", error)


def _train(cfg: DictConfig) -> float | None:
    from meta.observe.console import log_to, run_console

    exit_at_once("meta-train", BEFORE_START)  # again for each job of a multirun
    console = run_console()
    log_to(console)
    if cfg.seeds is not None:
        _train_seeds(cfg, console)
        return None
    try:
        start = run_start(cfg, run_id_of(cfg))
    except (ValueError, OSError, RuntimeError) as error:  # the input, and nothing written yet
        fail("meta-train", error)
    from meta.trainer import session

    plan = start.plan
    try:
        run_dir = session.run(plan, start.config_yaml, start.resolved, console, start.changes)
    except session.Stopped as stopped:
        fail("meta-train", str(stopped), stopped.code)
    return trained(start, run_dir)


def trained(start: Start, run_dir: Path) -> float | None:
    """meta-train's closing lines for a run it trained; the objective of a search's trial."""
    from meta.evaluation.objective import measure_objective

    closing_line(start, run_dir)
    value = measure_objective(start.plan.cfg, run_dir)
    report_objective(start.plan.cfg, value)
    return value


def closing_line(start: Start, run_dir: Path) -> None:
    """meta-train's closing line for a run it trained: where its results are, what next."""
    config = start.plan.cfg
    print(
        f"meta-train: done. Results in {run_dir} (final weights {run_dir / 'Brain.pt'}; "
        f"meta-steps in {run_dir / 'meta_steps.csv'}). Watch it with: "
        f"{command('tensorboard', '--logdir', str(run_dir))}. Evaluate it with: "
        f"{evaluate_command(config, start.plan.run_id, config.results_dir)}"
    )


QUICK_EVAL_UP_TO = 200_000
"""Inner env steps up to which a run is told to evaluate with `eval=quick` (the tour: 163,840).

meta-eval's defaults are sized for a study: on a run this small they take minutes longer than
the run itself, where `eval=quick` keeps the protocol and every output and ends in about one.
"""


def evaluate_command(config: Config, run_id: str, results_dir: str) -> str:
    """The meta-eval command meta-train's closing line prints: `eval=quick` for a small run."""
    steps = config.meta.steps * config.meta.meta_batch_size * config.ppo.max_steps
    quick = {"eval": "quick"} if steps <= QUICK_EVAL_UP_TO else {}
    return run_command("meta-eval", run_id, results_dir, **quick)


def report_objective(config: Config, value: float | None) -> None:
    """A search trial's objective (hparams_search) printed; nothing for a run without one."""
    from meta.config.metric import describe
    from meta.evaluation.objective import OBJECTIVE_FILE

    if value is not None:
        metric = str(config.optimized_metric)
        print(
            f"meta-train: objective {metric} = {value:.3f}: {describe(metric)} ({OBJECTIVE_FILE})"
        )


def _train_seeds(cfg: DictConfig, console: Any) -> None:
    """`seeds=[...]`: every seed's run planned as `seed=<s>` alone plans it, then all trained in
    lockstep in this process (meta.trainer.seeds)."""
    from meta.trainer import session

    try:
        starts = group_starts(cfg)
    except (ValueError, OSError, RuntimeError) as error:  # the input, and nothing written yet
        fail("meta-train", error)
    overrides = HydraConfig.get().overrides.task
    again = ["meta-train", *(o for o in overrides if override_key(o) not in ("resume", "force"))]
    try:
        run_dirs = session.run_group(starts, again, console)
    except session.Stopped as stopped:
        fail("meta-train", str(stopped), stopped.code)
    ids = [hydra_value(start.plan.run_id) for start in starts]
    where = [] if cfg.results_dir == DEFAULT_RESULTS_DIR else [f"results_dir={cfg.results_dir}"]
    evaluate = command("meta-eval", f"run_id={ids[0]}", *where, f"eval.run_ids=[{','.join(ids)}]")
    print(
        f"meta-train: done. Results in {', '.join(str(d) for d in run_dirs)} (final weights "
        f"Brain.pt and meta-steps meta_steps.csv in each). Evaluate them with: {evaluate}"
    )
    from meta.evaluation.objective import measure_objectives

    measured = measure_objectives([(s.plan.cfg, d) for s, d in zip(starts, run_dirs, strict=True)])
    for start, value in zip(starts, measured, strict=True):
        if isinstance(value, Exception):
            raise value
        report_objective(start.plan.cfg, value)


def _hydra(task: Any) -> Any:
    return hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")(task)


def train_main() -> None:
    """`meta-train [--verbose] [overrides]`."""
    exit_at_once("meta-train", BEFORE_START)
    _take_verbose()
    argv = sys.argv[1:]
    if {"-m", "--multirun"} & set(argv) and "seeds" in map(override_key, _overrides(argv)):
        fail("meta-train", MULTIRUN_SEEDS)
    register_configs()
    precheck("meta-train", sys.argv[1:])
    _run(_hydra(_train), "meta-train")


def _take_verbose() -> None:
    """`--verbose` (ours, not Hydra's): print the traceback of an error before its line."""
    if "--verbose" in sys.argv[1:]:
        sys.argv.remove("--verbose")
        errors.VERBOSE = True


EVAL_KEYS = (
    "run_id",
    "results_dir",
    "seed",
    "torch_device",
    "torch_threads",
    "torch_matmul_precision",
    "eval",
    "runtime",
    "hydra",
)


def _eval(cfg: DictConfig) -> None:
    try:
        config: Config = OmegaConf.to_object(cfg)  # type: ignore[assignment]
        config.eval.validate()  # before torch is imported: a bad value fails in a moment
        config.runtime.validate()
        check_matmul_precision(config.torch_matmul_precision)
        from meta.evaluation.evaluate import evaluate, plan_eval
        from meta.evaluation.table import table

        set_torch(config)
        checked = plan_eval(config, config.run_id)
    except Exception as error:  # all of it is about the input; nothing is written yet
        fail("meta-eval", error)
    from concurrent.futures.process import BrokenProcessPool

    from meta.runtime.executor import WORKER_LOST
    from meta.trainer.session import Stopped

    raise_on_signals()
    try:
        cells = evaluate(checked, progress=True)
    except (KeyboardInterrupt, Terminated) as error:
        code = exit_code(signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)
        exit_at_once("meta-eval", "interrupted before writing results")
        fail("meta-eval", "interrupted before writing results; run it again to start over", code)
    except Stopped as stopped:  # a joint pretraining stopped: its runs say where they stand
        exit_at_once("meta-eval", "interrupted before writing results")
        fail("meta-eval", str(stopped), stopped.code)
    except BrokenProcessPool:  # a worker of eval.workers died in an adaptation
        exit_at_once("meta-eval", "interrupted before writing results")
        fail("meta-eval", f"{WORKER_LOST} before writing results; run it again to start over", 1)
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
