"""Keep-N checkpoint manager, final model and ONNX export, laid out as ML-Agents does.

```
<run_dir>/<behavior>/checkpoint.pt             latest state, enough to resume
<run_dir>/<behavior>/<behavior>-<meta_step>.pt kept checkpoints (the newest keep_checkpoints)
<run_dir>/<behavior>.pt                        final weights (and <behavior>.onnx once exported)
```

Checkpoints are read with `torch.load(..., weights_only=True)`, so a state may only hold
tensors, dicts, lists, tuples, str, int, float, bool and None (RNG states of `torch`, `random`
and a numpy `Generator.bit_generator.state` qualify; numpy arrays and arbitrary objects do not:
store them as tensors or lists).
"""

from __future__ import annotations

import importlib.util
import logging
import pickle
import re
import time
import zipfile
from pathlib import Path
from typing import Any

import torch

from envs.constants import BEHAVIOR_NAME
from meta.run import faults
from meta.run.atomic import StrPath, atomic_path, atomic_write_bytes, torch_bytes
from meta.run.status import CheckpointEntry, TrainingStatus

logger = logging.getLogger(__name__)

LATEST = "checkpoint.pt"
STATUS_KEY = "training_status"
"""Where a checkpoint carries the training status of the meta-step it commits."""


def _first_line(error: BaseException) -> str:
    detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(error))
    text = detail[1] if detail else str(error).strip()
    return text.splitlines()[0].split(". ")[0] if text else type(error).__name__


class CheckpointError(RuntimeError):
    """A checkpoint that is missing or cannot be read (one-line message naming the file)."""


def load_checkpoint(path: StrPath) -> dict[str, Any]:
    """Load a checkpoint dict with `weights_only=True`; raises CheckpointError if unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if found:
            raise CheckpointError(
                f"{path}: holds {found[1]}; weights_only loads only tensors, containers and "
                "primitives"
            ) from None
        raise CheckpointError(f"{path}: corrupt checkpoint ({_first_line(e)})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt checkpoint ({_first_line(e)})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a dict, found {type(state).__name__}")
    return state


class CheckpointManager:
    """Writes, prunes and reads one behavior's checkpoints and records them in the status."""

    def __init__(
        self,
        run_dir: StrPath,
        status: TrainingStatus,
        behavior: str = BEHAVIOR_NAME,
        keep_checkpoints: int = 5,
    ) -> None:
        if keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints must be >= 0, got {keep_checkpoints}")
        self.run_dir = Path(run_dir)
        self.status = status
        self.behavior = behavior
        self.keep_checkpoints = keep_checkpoints
        self.committed: int | None = None
        """Meta-steps in the last checkpoint this manager committed (None: none yet)."""

    @property
    def latest_path(self) -> Path:
        """Path of the latest resumable state."""
        return self.run_dir / self.behavior / LATEST

    @property
    def final_path(self) -> Path:
        """Path of the final weights."""
        return self.run_dir / f"{self.behavior}.pt"

    def kept_path(self, meta_step: int) -> Path:
        """Path of the kept checkpoint of `meta_step`."""
        return self.run_dir / self.behavior / f"{self.behavior}-{meta_step}.pt"

    def save(
        self,
        meta_step: int,
        state: dict[str, Any],
        reward: float | None,
        steps: int,
        kept: bool = True,
    ) -> CheckpointEntry | None:
        """Commit a meta-step: its state, with the status it leaves, replaces `checkpoint.pt`.

        The replace of `checkpoint.pt` is the commit: the kept copy is written before it, and
        `training_status.json` (whose content the state carries under STATUS_KEY, so a resume
        restores it whichever of the two writes a kill fell between) and pruning come after.
        """
        kept = kept and self.keep_checkpoints > 0
        entry = CheckpointEntry(
            steps=int(steps),
            file_path=self._relative(self.kept_path(meta_step)),
            reward=None if reward is None else float(reward),
            creation_time=time.time(),
        )
        if kept:
            self.status.add_checkpoint(self.behavior, entry)
        self.status.set(self.behavior, "meta_step", int(meta_step))
        pruned = self._prune()
        data = torch_bytes({**state, STATUS_KEY: self.status.to_dict()})
        faults.at("before_kept", meta_step - 1)
        if kept:
            atomic_write_bytes(self.kept_path(meta_step), data, self.status.durable)
        faults.at("before_commit", meta_step - 1)
        atomic_write_bytes(self.latest_path, data, self.status.durable)
        self.committed = int(meta_step)
        faults.at("after_commit", meta_step - 1)
        self.status.save()
        faults.at("after_status", meta_step - 1)
        for path in pruned:
            path.unlink(missing_ok=True)
        return entry if kept else None

    def load(self, path: StrPath) -> dict[str, Any]:
        """Load a checkpoint file (a relative path is taken relative to the run directory)."""
        path = Path(path)
        return load_checkpoint(path if path.is_absolute() else self.run_dir / path)

    def save_final(
        self, weights: dict[str, Any], steps: int, reward: float | None
    ) -> CheckpointEntry:
        """Write `<behavior>.pt`, record it as the final checkpoint and save the status."""
        atomic_write_bytes(self.final_path, torch_bytes(weights))
        previous = self.status.final_checkpoint(self.behavior)
        entry = CheckpointEntry(
            steps=int(steps),
            file_path=self._relative(self.final_path),
            reward=None if reward is None else float(reward),
            creation_time=time.time(),
            auxillary_file_paths=previous.auxillary_file_paths if previous else [],
        )
        self.status.set_final_checkpoint(self.behavior, entry)
        self.status.save()
        return entry

    def export_onnx(
        self, module: torch.nn.Module, example_input: Any, path: StrPath | None = None
    ) -> Path | None:
        """Export `module` to ONNX (default `<behavior>.onnx`); warn and return None if unable."""
        target = Path(path) if path is not None else self.run_dir / f"{self.behavior}.onnx"
        if importlib.util.find_spec("onnx") is None:
            logger.warning("ONNX export skipped: the 'onnx' package is not installed")
            return None
        args = example_input if isinstance(example_input, tuple) else (example_input,)
        dynamo = importlib.util.find_spec("onnxscript") is not None
        try:
            with atomic_path(target) as tmp:
                torch.onnx.export(module, args, str(tmp), dynamo=dynamo)
        except Exception as e:  # exporter failures are many and version-specific
            logger.warning("ONNX export to %s failed: %s", target, str(e).splitlines()[0])
            return None
        final = self.status.final_checkpoint(self.behavior)
        relative = self._relative(target)
        if final is not None and relative not in final.auxillary_file_paths:
            final.auxillary_file_paths.append(relative)
            self.status.set_final_checkpoint(self.behavior, final)
            self.status.save()
        return target

    def _prune(self) -> list[Path]:
        """Forget the oldest entries beyond keep_checkpoints; return the files to delete.

        Kept-checkpoint files that no entry names (left by a crash between writing a file and
        saving the status) are deleted too.
        """
        entries = self.status.checkpoints(self.behavior)
        files: list[Path] = []
        for old in entries[: max(0, len(entries) - self.keep_checkpoints)]:
            self.status.remove_checkpoint(self.behavior, old.file_path)
            files += [self.run_dir / name for name in (old.file_path, *old.auxillary_file_paths)]
        named = {e.file_path for e in self.status.checkpoints(self.behavior)}
        pattern = re.compile(rf"{re.escape(self.behavior)}-\d+\.pt")
        files += [
            path
            for path in (self.run_dir / self.behavior).glob(f"{self.behavior}-*.pt")
            if pattern.fullmatch(path.name) and self._relative(path) not in named
        ]
        return files

    def _relative(self, path: Path) -> str:
        try:
            return path.relative_to(self.run_dir).as_posix()
        except ValueError:
            return path.as_posix()
