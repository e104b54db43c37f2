"""A run's hierarchical timers: mlagents_envs' own, on a TimerStack the run owns.

`timers.scope("env_step")` delegates to `mlagents_envs.timers.hierarchical_timer` on the run's
stack (not the library's per-thread global one), so two runs in one process never mix; the
tree is written as ML-Agents' `run_logs/timers.json`, metadata included.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import mlagents_envs
import numpy as np
import torch
from mlagents_envs.timers import TimerStack, get_timer_tree, hierarchical_timer

from meta.errors import without_passwords
from meta.process.atomic import StrPath, atomic_write_text


class RunTimers:
    """One run's timers: `scope(name)` for the inner PPO's `Timers` protocol, `write` at the end."""

    def __init__(self) -> None:
        self.stack = TimerStack()
        command = self.stack.metadata["command_line_arguments"]  # a storage URL's password too
        self.stack.add_metadata("command_line_arguments", without_passwords(command))
        # the versions ML-Agents' trainer adds to the library's own metadata
        self.stack.add_metadata("mlagents_envs_version", mlagents_envs.__version__)
        self.stack.add_metadata("pytorch_version", torch.__version__)
        self.stack.add_metadata("numpy_version", np.__version__)

    def shared_with(self, run_ids: Sequence[str]) -> None:
        """Say in the metadata that these timers time work shared with `run_ids` (one stack)."""
        self.stack.add_metadata("shared_with_runs", ",".join(run_ids))

    def scope(self, name: str) -> AbstractContextManager[Any]:
        """Time a block as `name`, nested under the innermost open scope."""
        return hierarchical_timer(name, self.stack)

    def tree(self) -> dict[str, Any]:
        """The tree in ML-Agents' timers.json format (root total: time since the run began)."""
        return get_timer_tree(self.stack)

    def write(self, path: StrPath) -> None:
        """Write `tree()` to `path` atomically, as JSON."""
        atomic_write_text(path, json.dumps(self.tree(), indent=4) + "\n")
