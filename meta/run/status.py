"""Training-status store in ML-Agents' `training_status.json` format 0.3.0, owned by the run.

The file maps categories to dicts: `"metadata"` (format and library versions), one category per
behavior (`"Brain"`: `checkpoints`, `final_checkpoint`, and the harness' own keys such as
`meta_step`) and one per curriculum parameter (`{"lesson_num": k}`). Checkpoint entries are
ML-Agents': `file_path` is the `.onnx` as ML-Agents resolves it, `<results_dir>/<run_id>/...`
with forward slashes (e.g. `"results/run/Brain/Brain-40960.onnx"`), and the `.pt` beside it is in
`auxillary_file_paths`, so that ML-Agents' checkpoint rotation finds and removes both (the
checkpoint manager finds them by name in the run directory, wherever it has moved).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlagents_envs
import torch

from meta.process.atomic import StrPath, atomic_write_text

logger = logging.getLogger(__name__)

STATUS_FORMAT_VERSION = "0.3.0"
METADATA = "metadata"
CHECKPOINTS = "checkpoints"
FINAL_CHECKPOINT = "final_checkpoint"
LESSON_NUM = "lesson_num"


class StatusError(ValueError):
    """A training-status file that cannot be used (one-line message naming the file)."""


@dataclass
class CheckpointEntry:
    """One checkpoint record, with ML-Agents' field names (including `auxillary_file_paths`)."""

    steps: int
    file_path: str
    reward: float | None
    creation_time: float
    auxillary_file_paths: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready dict stored in the status file."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckpointEntry:
        """Build an entry from its stored dict; raises KeyError/TypeError/ValueError if invalid."""
        reward = data["reward"]
        return cls(
            steps=int(data["steps"]),
            file_path=str(data["file_path"]),
            reward=None if reward is None else float(reward),
            creation_time=float(data["creation_time"]),
            auxillary_file_paths=[str(p) for p in data.get("auxillary_file_paths", [])],
        )


def current_metadata() -> dict[str, str]:
    """Return the metadata block written on every save."""
    return {
        "stats_format_version": STATUS_FORMAT_VERSION,
        "mlagents_version": str(mlagents_envs.__version__),
        "torch_version": str(torch.__version__),
    }


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


class TrainingStatus:
    """The run's status: categories of JSON values, saved atomically to one file."""

    def __init__(self, path: StrPath, state: dict[str, dict[str, Any]] | None = None) -> None:
        self.path = Path(path)
        self.durable = True
        """fsync each save (survives a power loss, not only a crash)."""
        self._state: dict[str, dict[str, Any]] = state if state is not None else {}
        self._state[METADATA] = current_metadata()

    @classmethod
    def new(cls, path: StrPath) -> TrainingStatus:
        """Start an empty status that will be saved at `path` (nothing is written yet)."""
        return cls(path)

    @classmethod
    def load(cls, path: StrPath) -> TrainingStatus:
        """Read and check a status file; raises StatusError on any problem."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise StatusError(f"{path}: training status file not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise StatusError(f"{path}: cannot read training status ({e})") from None
        try:
            state = json.loads(text)
        except json.JSONDecodeError as e:
            raise StatusError(f"{path}: invalid JSON ({e})") from None
        _check(path, state)
        return cls(path, state)

    def get(self, category: str, key: str, default: Any = None) -> Any:
        """Return the value stored under `category`/`key`, or `default`."""
        return self._state.get(category, {}).get(key, default)

    def set(self, category: str, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under `category`/`key`."""
        if category == METADATA:
            raise ValueError("the metadata category is written by TrainingStatus.save()")
        self._state.setdefault(category, {})[key] = value

    def lesson_num(self, parameter: str) -> int:
        """Return the curriculum lesson of environment parameter `parameter` (0 if unset)."""
        return int(self.get(parameter, LESSON_NUM, 0))

    def set_lesson_num(self, parameter: str, lesson: int) -> None:
        """Record the curriculum lesson of environment parameter `parameter`."""
        self.set(parameter, LESSON_NUM, int(lesson))

    def checkpoints(self, behavior: str) -> list[CheckpointEntry]:
        """Return the behavior's kept checkpoints, oldest first."""
        return [CheckpointEntry.from_dict(d) for d in self.get(behavior, CHECKPOINTS, [])]

    def add_checkpoint(self, behavior: str, entry: CheckpointEntry) -> None:
        """Append a checkpoint (replacing any entry with the same `file_path`)."""
        kept = [d for d in self.get(behavior, CHECKPOINTS, []) if d["file_path"] != entry.file_path]
        self.set(behavior, CHECKPOINTS, [*kept, entry.to_dict()])

    def remove_checkpoint(self, behavior: str, file_path: str) -> bool:
        """Forget the checkpoint stored at `file_path`; return whether one was removed."""
        entries = self.get(behavior, CHECKPOINTS, [])
        kept = [d for d in entries if d["file_path"] != file_path]
        self.set(behavior, CHECKPOINTS, kept)
        return len(kept) != len(entries)

    def final_checkpoint(self, behavior: str) -> CheckpointEntry | None:
        """Return the behavior's final checkpoint, if one was recorded."""
        data = self.get(behavior, FINAL_CHECKPOINT)
        return None if data is None else CheckpointEntry.from_dict(data)

    def set_final_checkpoint(self, behavior: str, entry: CheckpointEntry) -> None:
        """Record the behavior's final checkpoint."""
        self.set(behavior, FINAL_CHECKPOINT, entry.to_dict())

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Return a deep copy of everything stored, as it would be saved."""
        return copy.deepcopy(self._state)

    def save(self) -> None:
        """Write the status atomically (the metadata block is refreshed to this process)."""
        self._state[METADATA] = current_metadata()
        atomic_write_text(self.path, json.dumps(self._state, indent=4) + "\n", durable=self.durable)


def _check(path: Path, state: Any) -> None:
    """Raise StatusError unless `state` is a compatible status; warn on library mismatches."""
    if not isinstance(state, dict) or not all(isinstance(v, dict) for v in state.values()):
        raise StatusError(f"{path}: expected a JSON object of categories, each an object")
    metadata = state.get(METADATA)
    if metadata is None:
        raise StatusError(
            f"{path}: no 'metadata' section; not a training status from a compatible version"
        )
    version = str(metadata.get("stats_format_version", "missing"))
    if _major_minor(version) != _major_minor(STATUS_FORMAT_VERSION):
        raise StatusError(
            f"{path}: stats_format_version {version} is incompatible with {STATUS_FORMAT_VERSION}"
        )
    for category, values in state.items():
        for key in (CHECKPOINTS, FINAL_CHECKPOINT):
            if key not in values:
                continue
            entries = values[key] if key == CHECKPOINTS else [values[key]]
            try:
                for entry in entries:
                    CheckpointEntry.from_dict(entry)
            except (KeyError, TypeError, ValueError) as e:
                raise StatusError(f"{path}: malformed {category}.{key} entry ({e!r})") from None
    current = current_metadata()
    for lib in ("mlagents_version", "torch_version"):
        if metadata.get(lib) != current[lib]:
            logger.warning(
                "%s was written with %s %s, running %s; some state may not resume exactly",
                path,
                lib,
                metadata.get(lib),
                current[lib],
            )
