"""The configuration in force: a resumed run keeps its own, and changes are refused or recorded.

`configuration.yaml` in the run directory is the configuration the run trains with. On resume
the keys that the command line sets (directly, or through a group or an experiment) are compared
with it: a key listed in CHANGEABLE_ON_RESUME takes the new value and the change is recorded,
with the meta-step it applies from, in `run_logs/configuration_history.json`; any other
difference is refused, naming every differing key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from meta.process.atomic import atomic_write_text

HISTORY_FILE = Path("run_logs") / "configuration_history.json"
CONTROL_KEYS = ("run_id", "resume", "force", "results_dir")
"""Say what to do with a run; they are not part of its configuration."""
CHANGEABLE_ON_RESUME = (
    "meta.steps",
    "logger",
    "checkpoint.keep_checkpoints",
    "checkpoint.checkpoint_interval",
    "checkpoint.fsync",
    "env.path",
    "env.timeout_wait",
    "env.max_restarts",
    "env.base_port",
    "env.no_graphics",
    "torch_threads",
    "torch_device",
    "torch_matmul_precision",
    "runtime",
    "eval",
)
"""Keys (or whole sections) a resumed run may change; docs/training.md says what each affects."""


class ConfigurationDrift(ValueError):
    """Overrides on resume that differ from the run's configuration (one line)."""


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`; lists and empty mappings are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def changeable(key: str) -> bool:
    """Whether `key` may change on resume (itself or a section holding it is listed)."""
    return any(key == k or key.startswith(k + ".") for k in CHANGEABLE_ON_RESUME)


def _covers(touched: Iterable[str], key: str) -> bool:
    """Whether an override of one of `touched` set `key` (itself, or a section above it)."""
    return any(key == t or key.startswith(t + ".") for t in touched)


def reconcile(
    saved: Mapping[str, Any], given: Mapping[str, Any], touched: Iterable[str]
) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
    """The configuration in force, and the accepted changes `{key: (old, new)}`.

    `saved` is the run's configuration, `given` the one composed from the command line, and
    `touched` the keys its overrides set. Raises ConfigurationDrift naming every key that
    an override changes and that may not change on resume.
    """
    touched = [t for t in touched if t.split(".")[0] not in CONTROL_KEYS]
    old, new = flatten(saved), flatten(given)
    changes: dict[str, tuple[Any, Any]] = {}
    refused: list[str] = []
    for key in sorted(set(old) | set(new)):
        if key.split(".")[0] in CONTROL_KEYS or not _covers(touched, key):
            continue
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if changeable(key):
            changes[key] = (before, after)
        else:
            refused.append(f"{key} ({_short(before)} -> {_short(after)})")
    if refused:
        raise ConfigurationDrift(
            "resume=true continues the run's own configuration; these overrides differ from it "
            f"and cannot change on resume: {', '.join(refused)} (start a new run_id, or see "
            "docs/training.md for the keys that may change)"
        )
    merged = json.loads(json.dumps(dict(saved)))
    for key, (_, after) in changes.items():
        _assign(merged, key, after)
    return merged, changes


def record_changes(run_dir: Path, meta_step: int, changes: Mapping[str, tuple[Any, Any]]) -> None:
    """Append one entry to the run's configuration history (rewritten atomically)."""
    if not changes:
        return
    path = run_dir / HISTORY_FILE
    history = json.loads(path.read_text()) if path.is_file() else []
    history.append(
        {
            "meta_step": meta_step,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "changes": {k: {"from": a, "to": b} for k, (a, b) in changes.items()},
        }
    )
    atomic_write_text(path, json.dumps(history, indent=2) + "\n")


def _assign(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts, creating sections as needed."""
    *parents, leaf = key.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def _short(value: Any) -> str:
    """A value as the command line would write it, cut to a readable length."""
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."
