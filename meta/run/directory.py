"""The run directory: ML-Agents' layout, and the rules for resume, force and initialize_from.

`initialize_from` names a meta-train run or an ML-Agents run directory (`mlagents-learn
--run-id`) under the same `results_dir`, or is a path (relative to the working directory) to
such a directory elsewhere, which is only read: θ starts from its `Brain/checkpoint.pt`,
mapped from ML-Agents' modules (`meta.interop.mlagents`).

A run id is a name (`meta.run.names`), and nothing a run writes or deletes lies outside its
directory and its lock file: `force=true` removes the directory (a symlink in its place: the
link) after checking it is a child of `results_dir`, and a resume refuses a run directory that
is a symlink or holds one leading out of it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from envs.constants import BEHAVIOR_NAME
from meta.config import Config
from meta.config.ppo import NetworkConfig
from meta.interop.mlagents import Network, from_mlagents, is_mlagents, settings_misfit
from meta.observe.reporter import INNER_UPDATES_TABLE
from meta.observe.tables import header_error
from meta.process.atomic import atomic_write_text
from meta.run.checkpoints import LATEST, STATUS_KEY, CheckpointError, load_checkpoint
from meta.run.export import CONFIG_FILE
from meta.run.names import check_name
from meta.run.status import TrainingStatus

STATUS_FILE = Path("run_logs") / "training_status.json"
TIMERS_FILE = Path("run_logs") / "timers.json"
RESUME_KEYS = ("theta", "meta_step", "env_steps", "task_counts", "parameters")
"""What Brain/checkpoint.pt must hold for a run to resume from it."""


class RunError(ValueError):
    """A run directory that cannot be used as asked; the message is one line."""


@dataclass
class RunStart:
    """Where a run starts: its directory, status, and the state to resume from (if any)."""

    run_dir: Path
    status: TrainingStatus
    resume_state: dict[str, Any] | None
    initial_weights: dict[str, torch.Tensor] | None


def run_path(cfg: Config, run_id: str) -> Path:
    """results_dir/run_id, for a run id that is a name."""
    return Path(cfg.results_dir) / check_name(run_id)


def source_dir(results_dir: str, ref: str, key: str = "initialize_from") -> Path:
    """A run to read from: a name in `results_dir`, or a path holding a separator, as it is."""
    if "/" in ref or os.sep in ref:
        return Path(ref)
    return Path(results_dir) / check_name(ref, key)


def check_inside(run_dir: Path) -> None:
    """Refuse a run directory that is a symlink or holds a symlink leading out of it."""
    if run_dir.is_symlink():
        raise RunError(
            f"{run_dir} is a symlink to {os.readlink(run_dir)}: a run's files stay inside "
            "results_dir; refused"
        )
    root = run_dir.resolve()
    for folder, dirs, files in os.walk(run_dir):  # symlinked folders are listed, not entered
        if Path(folder) == run_dir and "wandb" in dirs:
            dirs.remove(
                "wandb"
            )  # wandb's own folder: it links into itself, and we never write there
        for name in (*dirs, *files):
            path = Path(folder) / name
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise RunError(
                    f"{path} is a symlink to {path.resolve()}, outside the run: refused "
                    "(remove the link, or start over with force=true)"
                )


def remove_run(results_dir: str, run_dir: Path) -> None:
    """force=true: delete the run directory, or only the symlink standing in its place."""
    if run_dir.is_symlink():
        run_dir.unlink()
        return
    if not run_dir.exists():
        return
    if run_dir.resolve().parent != Path(results_dir).resolve():
        raise RunError(f"{run_dir} is not a folder directly inside {results_dir}; not deleted")
    shutil.rmtree(run_dir)  # removes symlinks inside, never what they point to


def latest_weights(
    results_dir: str,
    run_id: str,
    network: NetworkConfig | None = None,
    sizes: tuple[int, int] | None = None,
) -> dict[str, torch.Tensor]:
    """A run's latest weights: Brain/checkpoint.pt's theta (or ML-Agents' modules), else Brain.pt.

    Weights mapped from an ML-Agents checkpoint are checked against `network` and the
    (observation, action) `sizes` when given: a mismatch is a one-line RunError naming it.
    """
    run_dir = source_dir(results_dir, run_id)
    latest = run_dir / BEHAVIOR_NAME / LATEST
    final = run_dir / f"{BEHAVIOR_NAME}.pt"
    if latest.is_file():
        state = load_checkpoint(latest)
        if not is_mlagents(state):
            if "theta" not in state:
                raise CheckpointError(f"{latest}: neither a meta-train nor an ML-Agents checkpoint")
            return state["theta"]
        theta, found = from_mlagents(state, str(latest))
        _check_fit(found, latest, network, sizes)
        return theta
    if final.is_file():
        return load_checkpoint(final)
    others = sorted(p.parent.name for p in run_dir.glob(f"*/{LATEST}"))
    if others:
        raise RunError(
            f"run {run_id!r} in {run_dir} has no behavior {BEHAVIOR_NAME!r} (it has "
            f"{', '.join(others)}); our tasks' behavior is {BEHAVIOR_NAME!r}"
        )
    raise RunError(
        f"run {run_id!r} has no weights in {run_dir} "
        f"(no {BEHAVIOR_NAME}/{LATEST} nor {BEHAVIOR_NAME}.pt)"
    )


def _check_fit(
    found: Network, path: Path, network: NetworkConfig | None, sizes: tuple[int, int] | None
) -> None:
    """Refuse ML-Agents weights whose network is not this one, naming every difference."""
    misfit = settings_misfit(found, network) if network is not None else ""
    if sizes is not None:
        expected = Network(*sizes, found.hidden_units, found.num_layers, found.normalize)
        size_misfit = found.misfit(expected, ("obs_size", "action_size"))
        misfit = "; ".join(m for m in (size_misfit, misfit) if m)
    if misfit:
        raise RunError(f"{path} does not fit this network: {misfit}")


def resume_state(run_dir: Path) -> dict[str, Any]:
    """The state of the run's last committed meta-step; CheckpointError if it is not one."""
    path = run_dir / BEHAVIOR_NAME / LATEST
    state = load_checkpoint(path)
    missing = [key for key in (*RESUME_KEYS, STATUS_KEY) if key not in state]
    if missing:
        raise CheckpointError(
            f"{path}: not a meta-train checkpoint of this version (missing {', '.join(missing)})"
        )
    return state


def check(cfg: Config, run_id: str) -> None:
    """Refuse, before anything is written, what the run directory cannot do."""
    run_dir = run_path(cfg, run_id)
    exists = run_dir.exists() or run_dir.is_symlink()
    if cfg.resume:
        if not exists:
            raise RunError(f"resume=true but run {run_id!r} does not exist in {cfg.results_dir}")
        if not (run_dir / BEHAVIOR_NAME / LATEST).is_file():
            raise RunError(
                f"resume=true but {run_dir / BEHAVIOR_NAME / LATEST} is missing: the run has no "
                "completed meta-step to resume from (start it over with force=true)"
            )
        check_inside(run_dir)
        TrainingStatus.load(run_dir / STATUS_FILE)  # a damaged status is refused, not repaired
        done = int(resume_state(run_dir)["meta_step"])
        if cfg.meta.steps < done:
            raise RunError(
                f"meta.steps={cfg.meta.steps} is below the {done} meta-steps run {run_id!r} "
                "has completed"
            )
    elif exists and not cfg.force:
        raise RunError(
            f"run directory {run_dir} already exists: pass resume=true to continue "
            "it or force=true to start over"
        )
    if cfg.initialize_from:
        source = source_dir(cfg.results_dir, cfg.initialize_from)
        if cfg.force and exists and _same_or_inside(source, run_dir):
            raise RunError("initialize_from names the run that force=true would erase")
        latest_weights(cfg.results_dir, cfg.initialize_from, cfg.network)


def check_tables(run_dir: Path, tables: dict[str, list[str]]) -> None:
    """Refuse a resume whose CSV tables cannot take this run's rows (damaged headers)."""
    for table, columns in tables.items():
        error = header_error(run_dir / f"{table}.csv", columns)
        if error and table == INNER_UPDATES_TABLE:  # the only table a resume can leave off
            raise RunError(
                f"{error}: refused; resume with logger.per_update_csv=false to go on without it"
            )
        if error:
            raise RunError(f"{error}: refused (the table is not repaired)")


def _same_or_inside(path: Path, run_dir: Path) -> bool:
    return path.resolve().is_relative_to(run_dir.resolve())


def open_run(cfg: Config, run_id: str, config_yaml: str) -> RunStart:
    """Create, restart or reopen the run directory (call `check` first)."""
    run_dir = run_path(cfg, run_id)
    initial = (
        latest_weights(cfg.results_dir, cfg.initialize_from, cfg.network)
        if cfg.initialize_from
        else None
    )
    if cfg.resume:
        state = resume_state(run_dir)
        status = TrainingStatus(run_dir / STATUS_FILE, state.pop(STATUS_KEY))
        status.save()  # the status of the last commit, whether or not a kill lost its save
        atomic_write_text(run_dir / CONFIG_FILE, config_yaml)  # with any accepted change
        return RunStart(run_dir, status, state, None)
    if cfg.force:
        remove_run(cfg.results_dir, run_dir)
    (run_dir / "run_logs").mkdir(parents=True, exist_ok=True)
    (run_dir / BEHAVIOR_NAME).mkdir(exist_ok=True)
    atomic_write_text(run_dir / CONFIG_FILE, config_yaml)
    status = TrainingStatus.new(run_dir / STATUS_FILE)
    status.save()
    return RunStart(run_dir, status, None, initial)
