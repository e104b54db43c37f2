"""A batch of trials trained as one group of runs in this process (Hydra's basic launcher).

Each trial is planned as meta-train plans it alone, inside its own job's Hydra configuration
(its run id, its configuration in force); the runs then train in lockstep, the inner trainings
of all of them that share their settings in one stack (meta.trainer.session.run_apart), and
their objectives are measured together, the adaptations that share their settings as one stack
(meta.evaluation.objective.measure_objectives). A trial that cannot run, fails or stops while
training, or fails its measurement comes back as a failed job with its error, the others going
on.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobRuntime, JobStatus, setup_globals
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from meta.cli import closing_line, report_objective
from meta.errors import fail
from meta.overrides import run_id_of, run_start, set_torch
from meta.process.signals import BEFORE_START, exit_at_once

if TYPE_CHECKING:
    from meta.trainer import session

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
"""Hydra's default launcher, which runs the jobs one after the other in this process."""


def trains_together(config: DictConfig) -> bool:
    """Whether the search's launcher is Hydra's basic one: its batches then train as one."""
    return bool(OmegaConf.select(config, "hydra.launcher._target_") == BASIC_LAUNCHER)


def launch_together(
    hydra_context: HydraContext,
    config: DictConfig,
    batch: Sequence[Sequence[str]],
    initial_job_idx: int,
    labels: Sequence[str],
) -> Sequence[JobReturn]:
    """Each trial's job return, its overrides in `batch`, its runs trained as one group;
    `labels` name the runs on the console."""
    from meta.evaluation.objective import measure_objectives
    from meta.observe.console import log_to, run_console
    from meta.trainer import session

    setup_globals()
    exit_at_once("meta-train", BEFORE_START)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    jobs = [_job(hydra_context, config, o, initial_job_idx + n) for n, o in enumerate(batch)]
    console = run_console()
    log_to(console)
    returns: dict[int, JobReturn] = {}
    starts: dict[int, session.Start] = {}
    for n, job in enumerate(jobs):
        with _as_job(job):
            try:
                starts[n] = run_start(job.cfg, run_id_of(job.cfg))  # type: ignore[arg-type]
            except Exception as error:  # the trial's input: the others go on
                returns[n] = _ended(job, error)
    for order in _groups(starts):
        set_torch(starts[order[0]].plan.cfg)
        try:
            ends = session.run_apart(
                [starts[n] for n in order], [labels[n] for n in order], console
            )
        except session.Stopped as stopped:  # a signal, or Ray that cannot start: the search stops
            fail("meta-train", str(stopped), stopped.code)
        finished: dict[int, Path] = {}
        for n, end in zip(order, ends, strict=True):
            if isinstance(end, Exception):
                returns[n] = _ended(jobs[n], end)
                continue
            with _as_job(jobs[n]):
                closing_line(starts[n], end)
            finished[n] = end
        measured = measure_objectives([(starts[n].plan.cfg, d) for n, d in finished.items()])
        for n, value in zip(finished, measured, strict=True):
            if not isinstance(value, Exception):  # a failed measurement is its trial's return
                with _as_job(jobs[n]):
                    report_objective(starts[n].plan.cfg, value)
            returns[n] = _ended(jobs[n], value)
    return [returns[n] for n in range(len(jobs))]


def _groups(starts: Mapping[int, session.Start]) -> list[list[int]]:
    """The trials that can train as one group: those that share what a group shares (its
    environments, runtime and torch's process settings), in trial order."""
    groups: dict[str, list[int]] = {}
    for n in sorted(starts):
        cfg = starts[n].plan.cfg
        key = repr((cfg.env, cfg.runtime, cfg.torch_threads, cfg.torch_matmul_precision))
        groups.setdefault(key, []).append(n)
    return list(groups.values())


def _job(
    hydra_context: HydraContext, config: DictConfig, overrides: Sequence[str], idx: int
) -> JobReturn:
    """A trial's job as Hydra's basic launcher sets it up: its configuration (`cfg`, without
    `hydra`; `hydra_cfg`, whole), its number and output directory."""
    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = idx
        sweep_config.hydra.job.num = idx
    output_dir = os.path.join(
        str(sweep_config.hydra.sweep.dir), str(sweep_config.hydra.sweep.subdir)
    )
    with read_write(sweep_config.hydra.runtime), open_dict(sweep_config.hydra.runtime):
        sweep_config.hydra.runtime.output_dir = os.path.abspath(output_dir)
    task_cfg = copy.deepcopy(sweep_config)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    return JobReturn(
        overrides=OmegaConf.to_container(sweep_config.hydra.overrides.task),  # type: ignore[arg-type]
        cfg=task_cfg,
        hydra_cfg=sweep_config,
        working_dir=os.getcwd(),
    )


@contextlib.contextmanager
def _as_job(job: JobReturn) -> Iterator[None]:
    """Hydra's configuration in the block is the job's, as in the job's task function."""
    before = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(job.hydra_cfg)  # type: ignore[arg-type]
    try:
        yield
    finally:
        HydraConfig.instance().cfg = before


def _ended(job: JobReturn, value: object) -> JobReturn:
    """The job's return: `value`, or its error as a failed job's."""
    failed = isinstance(value, Exception)
    status = JobStatus.FAILED if failed else JobStatus.COMPLETED
    return JobReturn(
        overrides=job.overrides,
        cfg=job.cfg,
        hydra_cfg=job.hydra_cfg,
        working_dir=job.working_dir,
        task_name=JobRuntime.instance().get("name"),
        status=status,
        _return_value=value,
    )
