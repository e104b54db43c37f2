"""Keep-N checkpoint manager and final model, laid out as ML-Agents lays them out.

```
<run_dir>/<behavior>/checkpoint.pt             latest state: resumes, and ML-Agents' modules
<run_dir>/<behavior>/<behavior>-<steps>.pt     kept checkpoints (the newest keep_checkpoints)
<run_dir>/<behavior>/<behavior>-<steps>.onnx   their ONNX, ML-Agents' signature
<run_dir>/<behavior>.pt                        final weights (our state_dict)
<run_dir>/<behavior>.onnx                      final ONNX
```

`<steps>` is the run's total env steps, the step ML-Agents sees. A checkpoint holds our resume
state (`theta`, counters, status) beside ML-Agents' modules (`Policy`, `Optimizer:critic`,
`Optimizer:value_optimizer`, `global_step`), so `mlagents-learn --initialize-from` and
`--resume` load θ from the very file a meta-train resume reads. Status entries are ML-Agents':
`file_path` is the `.onnx` as ML-Agents resolves it (`<results_dir>/<run_id>/<behavior>/...`),
the `.pt` is in `auxillary_file_paths`, so its checkpoint rotation finds and removes them.

Checkpoints are read with `torch.load(..., weights_only=True)`; a file whose pickle names
anything else is refused as code, never loaded, naming the globals it would call
(`torch.serialization.get_unsafe_globals_in_checkpoint` reads the pickle's opcodes, calling
nothing; a pickle that torch's weights-only loader cannot read at all, such as one of protocol
4 or 5, is refused as corrupt). So a state may only hold
tensors, dicts, lists, tuples, str, int, float, bool and None (RNG states of `torch`, `random`
and a numpy `Generator.bit_generator.state` qualify; numpy arrays and arbitrary objects do not:
store them as tensors or lists).
"""

from __future__ import annotations

import logging
import pickle
import re
import time
import zipfile
from pathlib import Path, PurePath
from typing import Any

import torch

from envs.constants import BEHAVIOR_NAME
from meta.config.ppo import NetworkConfig
from meta.process import faults
from meta.process.atomic import StrPath, atomic_write_bytes, torch_bytes
from meta.run.export import MLAgentsExport, run_network
from meta.run.status import CheckpointEntry, TrainingStatus

logger = logging.getLogger(__name__)

LATEST = "checkpoint.pt"
STATUS_KEY = "training_status"
"""Where a checkpoint carries the training status of the meta-step it commits."""


def _torch_reason(error: BaseException) -> str:
    """torch's reason in a few words, never its advice to load with weights_only=False."""
    detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(error))
    text = detail[1] if detail else str(error).strip()
    first = text.splitlines()[0].split(". ")[0] if text else ""
    return first if first and "weights_only" not in first else type(error).__name__


def refused_globals(path: Path) -> list[str]:
    """The globals `path`'s pickle names that a weights-only load refuses, sorted; [] if unread."""
    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except (OSError, ValueError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile):
        return []


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
        code = refused_globals(path)
        if code:
            raise CheckpointError(
                f"{path} holds code ({', '.join(code)}), not weights: refused"
            ) from None
        raise CheckpointError(f"{path}: corrupt checkpoint ({_torch_reason(e)})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt checkpoint ({_torch_reason(e)})") from None
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
        network: NetworkConfig | None = None,
    ) -> None:
        if keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints must be >= 0, got {keep_checkpoints}")
        self.run_dir = Path(run_dir)
        self.status = status
        self.behavior = behavior
        self.keep_checkpoints = keep_checkpoints
        self.export = MLAgentsExport(network or run_network(self.run_dir))
        """ML-Agents' modules and ONNX of θ (network: the run's own, from its configuration)."""
        self.committed: int | None = None
        """Meta-steps in the last checkpoint this manager committed (None: none yet)."""

    @property
    def latest_path(self) -> Path:
        """Path of the latest resumable state."""
        return self.run_dir / self.behavior / LATEST

    @property
    def final_path(self) -> Path:
        """Path of the final weights (our state_dict)."""
        return self.run_dir / f"{self.behavior}.pt"

    @property
    def final_onnx_path(self) -> Path:
        """Path of the final ONNX."""
        return self.run_dir / f"{self.behavior}.onnx"

    def kept_path(self, steps: int, suffix: str = ".pt") -> Path:
        """Path of the kept checkpoint at `steps` total env steps (`suffix` ".onnx": its ONNX)."""
        return self.run_dir / self.behavior / f"{self.behavior}-{steps}{suffix}"

    def save(
        self,
        meta_step: int,
        state: dict[str, Any],
        reward: float | None,
        steps: int,
        kept: bool = True,
    ) -> CheckpointEntry | None:
        """Commit a meta-step: its state, with the status it leaves, replaces `checkpoint.pt`.

        `state["theta"]` is also written as ML-Agents' modules at global step `steps`. The
        replace of `checkpoint.pt` is the commit: the kept copy (and its ONNX) is written before
        it, and `training_status.json` (whose content the state carries under STATUS_KEY, so a
        resume restores it whichever of the two writes a kill fell between) and pruning after.
        """
        kept = kept and self.keep_checkpoints > 0
        entry = self._entry(self.kept_path(steps, ".onnx"), steps, reward, self.kept_path(steps))
        if kept:
            self.status.add_checkpoint(self.behavior, entry)
        self.status.set(self.behavior, "meta_step", int(meta_step))
        pruned = self._prune()
        modules = self.export.modules(state["theta"], steps)
        data = torch_bytes({**state, **modules, STATUS_KEY: self.status.to_dict()})
        faults.at("before_kept", meta_step - 1)
        if kept:
            self._write_kept(steps, data, modules)
        faults.at("before_commit", meta_step - 1)
        atomic_write_bytes(self.latest_path, data, self.status.durable)
        self.committed = int(meta_step)
        faults.at("after_commit", meta_step - 1)
        self.status.save()
        faults.at("after_status", meta_step - 1)
        for path in pruned:
            path.unlink(missing_ok=True)
        return entry if kept else None

    def _write_kept(self, steps: int, data: bytes, modules: dict[str, Any]) -> None:
        """The kept `.onnx` and `.pt` of `steps`; if either write fails, neither is left."""
        written: list[Path] = []
        try:
            onnx = self.export.onnx(modules)
            for path, content in (
                (self.kept_path(steps, ".onnx"), onnx),
                (self.kept_path(steps), data),
            ):
                if content is not None:
                    atomic_write_bytes(path, content, self.status.durable)
                    written.append(path)
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)
            raise

    def load(self, path: StrPath) -> dict[str, Any]:
        """Load a checkpoint file (a relative path is taken relative to the run directory)."""
        path = Path(path)
        return load_checkpoint(path if path.is_absolute() else self.run_dir / path)

    def local(self, file_path: str) -> Path:
        """The file a status entry names, in this run directory, wherever the run was written."""
        name = PurePath(file_path).name
        final = name in (self.final_path.name, self.final_onnx_path.name)
        return (self.run_dir if final else self.run_dir / self.behavior) / name

    def save_final(
        self, weights: dict[str, Any], steps: int, reward: float | None
    ) -> CheckpointEntry:
        """Write `<behavior>.pt` and `<behavior>.onnx`, record the final checkpoint, save status.

        The entry is ML-Agents': the `.onnx`, with the kept `.pt` of the same step beside it.
        """
        atomic_write_bytes(self.final_path, torch_bytes(weights))
        onnx = self.export.onnx(self.export.modules(weights, steps))
        if onnx is not None:
            atomic_write_bytes(self.final_onnx_path, onnx)
        kept = self.kept_path(steps)
        entry = self._entry(self.final_onnx_path, steps, reward, kept if kept.is_file() else None)
        self.status.set_final_checkpoint(self.behavior, entry)
        self.status.save()
        return entry

    def _entry(
        self, path: Path, steps: int, reward: float | None, auxiliary: Path | None
    ) -> CheckpointEntry:
        """A status entry as ML-Agents writes it: paths as the run directory's path resolves."""
        return CheckpointEntry(
            steps=int(steps),
            file_path=path.as_posix(),
            reward=None if reward is None else float(reward),
            creation_time=time.time(),
            auxillary_file_paths=[] if auxiliary is None else [auxiliary.as_posix()],
        )

    def _prune(self) -> list[Path]:
        """Forget the oldest entries beyond keep_checkpoints; return the files to delete.

        Kept-checkpoint files that no entry names (left by a crash between writing a file and
        saving the status) are deleted too.
        """
        entries = self.status.checkpoints(self.behavior)
        files: list[Path] = []
        for old in entries[: max(0, len(entries) - self.keep_checkpoints)]:
            self.status.remove_checkpoint(self.behavior, old.file_path)
            files += [self.local(name) for name in (old.file_path, *old.auxillary_file_paths)]
        named = {
            PurePath(name).name
            for entry in self.status.checkpoints(self.behavior)
            for name in (entry.file_path, *entry.auxillary_file_paths)
        }
        pattern = re.compile(rf"{re.escape(self.behavior)}-\d+\.(pt|onnx)")
        files += [
            path
            for path in (self.run_dir / self.behavior).glob(f"{self.behavior}-*")
            if pattern.fullmatch(path.name) and path.name not in named
        ]
        return files
