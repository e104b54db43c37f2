"""Hierarchical timers and gauges owned by the run, written as ML-Agents' `timers.json`.

`timers = TimerTree(); with timers.scope("env_step"): ...` accumulates wall time per path of
nested scope names. A tree is used by one thread; a worker (thread, process, Ray task) keeps its
own tree and the parent merges its `to_dict()` with `merge`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping
from typing import Any

import mlagents_envs
import numpy as np
import torch

from meta.run.atomic import StrPath, atomic_write_text

TIMER_FORMAT_VERSION = "0.1.0"
_perf_counter = time.perf_counter


class TimerNode:
    """Time spent in one path of scopes; also the context manager that times it."""

    __slots__ = ("_start", "_tree", "children", "count", "is_parallel", "parent", "total")

    def __init__(self, tree: TimerTree, parent: TimerNode | None) -> None:
        self._tree = tree
        self.parent: TimerNode = self if parent is None else parent  # the root is its own parent
        self.children: dict[str, TimerNode] = {}
        self.total = 0.0
        self.count = 0
        self.is_parallel = False
        self._start = 0.0

    def __enter__(self) -> TimerNode:
        self._tree._current = self
        self._start = _perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.total += _perf_counter() - self._start
        self.count += 1
        self._tree._current = self.parent

    def child(self, name: str) -> TimerNode:
        """Return the child called `name`, creating it if needed."""
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = TimerNode(self._tree, self)
        return node

    def to_dict(self, total: float | None = None) -> dict[str, Any]:
        """Return `{total, count, self[, is_parallel][, children]}` as ML-Agents writes it."""
        total = self.total if total is None else total
        out: dict[str, Any] = {"total": total, "count": self.count}
        if self.is_parallel:
            out["is_parallel"] = True
        children = {name: node.to_dict() for name, node in self.children.items()}
        out["self"] = max(0.0, total - sum(c["total"] for c in children.values()))
        if children:
            out["children"] = children
        return out

    def merge(self, other: Mapping[str, Any], is_parallel: bool) -> None:
        """Add a node dict (from `to_dict`) and its children into this node."""
        self.total += float(other.get("total", 0.0))
        self.count += int(other.get("count", 0))
        self.is_parallel |= is_parallel or bool(other.get("is_parallel", False))
        for name, child in other.get("children", {}).items():
            self.child(name).merge(child, is_parallel)


class Gauge:
    """Latest value of a metric with its min, max and count (ML-Agents' GaugeNode)."""

    __slots__ = ("count", "max", "min", "value")

    def __init__(self, value: float) -> None:
        self.value = self.min = self.max = value
        self.count = 1

    def update(self, value: float) -> None:
        """Record a new value."""
        self.value = value
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        self.count += 1

    def to_dict(self) -> dict[str, float]:
        """Return `{value, min, max, count}`."""
        return {"value": self.value, "min": self.min, "max": self.max, "count": self.count}


class TimerTree:
    """A run's timer tree, gauges and metadata."""

    def __init__(self) -> None:
        self.root = TimerNode(self, None)
        self._current = self.root
        self._start = _perf_counter()
        self.gauges: dict[str, Gauge] = {}
        self.metadata: dict[str, str] = {
            "timer_format_version": TIMER_FORMAT_VERSION,
            "start_time_seconds": str(int(time.time())),
            "python_version": sys.version,
            "command_line_arguments": " ".join(sys.argv),
            "mlagents_envs_version": mlagents_envs.__version__,
            "pytorch_version": torch.__version__,
            "numpy_version": np.__version__,
        }

    def scope(self, name: str) -> TimerNode:
        """Return the timer for `name` under the innermost open scope; use it in a `with`."""
        current = self._current
        node = current.children.get(name)
        if node is None:
            node = current.children[name] = TimerNode(self, current)
        return node

    def gauge(self, name: str, value: float) -> None:
        """Record a gauge value (NaN is ignored, as ML-Agents does)."""
        value = float(value)
        if math.isnan(value):
            return
        gauge = self.gauges.get(name)
        if gauge is None:
            self.gauges[name] = Gauge(value)
        else:
            gauge.update(value)

    def add_metadata(self, key: str, value: str) -> None:
        """Add a string to the metadata block."""
        self.metadata[key] = str(value)

    def merge(self, tree: Mapping[str, Any], name: str | None = None) -> None:
        """Merge a worker's `to_dict()` into the innermost open scope, or into child `name`.

        With `name` the worker's total and count go to that child; merged nodes are marked
        `is_parallel`, since workers running side by side can exceed their parent's time.
        """
        if name is None:
            for child_name, child in tree.get("children", {}).items():
                self._current.child(child_name).merge(child, is_parallel=True)
        else:
            self._current.child(name).merge(tree, is_parallel=True)
        for gauge_name, g in tree.get("gauges", {}).items():
            mine = self.gauges.get(gauge_name)
            if mine is None:
                mine = self.gauges[gauge_name] = Gauge(float(g["value"]))
                mine.count = 0
            mine.value = float(g["value"])
            mine.min = min(mine.min, float(g["min"]))
            mine.max = max(mine.max, float(g["max"]))
            mine.count += int(g["count"])

    def to_dict(self) -> dict[str, Any]:
        """Return the tree in ML-Agents' timers.json format (root total = time since creation)."""
        self.metadata["end_time_seconds"] = str(int(time.time()))
        body = self.root.to_dict(total=_perf_counter() - self._start)
        body["count"] = 1
        return {
            "name": "root",
            "gauges": {name: g.to_dict() for name, g in self.gauges.items()},
            "metadata": dict(self.metadata),
            **body,
        }

    def write(self, path: StrPath) -> None:
        """Write `to_dict()` atomically as JSON."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=4) + "\n")
