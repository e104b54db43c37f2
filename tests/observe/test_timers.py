"""Timer tree: ML-Agents timers.json format, nesting, gauges, merging, low overhead."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from meta.observe.timers import TimerTree


def _check_totals(node: dict[str, Any]) -> None:
    children = node.get("children", {})
    assert sum(c["total"] for c in children.values()) <= node["total"] + 1e-9
    assert node["self"] >= 0.0
    for child in children.values():
        _check_totals(child)


def test_nested_scopes_build_mlagents_tree(tmp_path: Path) -> None:
    timers = TimerTree()
    for _ in range(3):
        with timers.scope("inner_training"):
            for _ in range(4):
                with timers.scope("env_step"):
                    time.sleep(0.001)
            with timers.scope("ppo_update"):
                pass
    with timers.scope("env_step"):
        pass
    timers.gauge("Brain.mean_reward", 1.0)
    timers.gauge("Brain.mean_reward", -2.0)
    timers.gauge("Brain.mean_reward", float("nan"))
    timers.write(tmp_path / "run_logs" / "timers.json")

    tree = json.loads((tmp_path / "run_logs" / "timers.json").read_text())
    assert tree["name"] == "root" and tree["count"] == 1
    meta = tree["metadata"]
    assert meta["timer_format_version"] == "0.1.0"
    for key in (
        "start_time_seconds",
        "end_time_seconds",
        "python_version",
        "command_line_arguments",
        "mlagents_envs_version",
    ):
        assert isinstance(meta[key], str)
    assert tree["gauges"] == {
        "Brain.mean_reward": {"value": -2.0, "min": -2.0, "max": 1.0, "count": 2}
    }
    inner = tree["children"]["inner_training"]
    assert inner["count"] == 3
    assert inner["children"]["env_step"]["count"] == 12
    assert inner["children"]["env_step"]["total"] >= 0.012
    assert "children" not in inner["children"]["ppo_update"]
    assert tree["children"]["env_step"]["count"] == 1
    _check_totals(tree)


def test_exception_inside_scope_is_timed_and_unwinds() -> None:
    timers = TimerTree()
    with pytest.raises(KeyError), timers.scope("outer"), timers.scope("failing"):
        raise KeyError("boom")
    with timers.scope("after"):
        pass
    children = timers.to_dict()["children"]
    assert set(children) == {"outer", "after"}
    assert children["outer"]["children"]["failing"]["count"] == 1


def test_trees_are_independent_instances() -> None:
    a, b = TimerTree(), TimerTree()
    with a.scope("only_in_a"):
        pass
    assert "children" not in b.to_dict()


def test_merge_worker_tree_marks_parallel() -> None:
    worker = TimerTree()
    for _ in range(2):
        with worker.scope("env_step"):
            pass
    worker.gauge("fps", 10.0)
    timers = TimerTree()
    timers.gauge("fps", 30.0)
    with timers.scope("meta_batch"):
        timers.merge(worker.to_dict(), name="task_0")
        timers.merge(worker.to_dict(), name="task_1")
    tree = timers.to_dict()
    task = tree["children"]["meta_batch"]["children"]["task_0"]
    assert task["is_parallel"] and task["count"] == 1
    assert task["children"]["env_step"]["count"] == 2
    assert tree["gauges"]["fps"] == {"value": 10.0, "min": 10.0, "max": 30.0, "count": 3}


def test_scope_overhead_is_small() -> None:
    timers = TimerTree()
    n = 20_000
    start = time.perf_counter()
    with timers.scope("outer"):
        for _ in range(n):
            with timers.scope("env_step"):
                pass
    per_scope = (time.perf_counter() - start) / n
    assert per_scope < 5e-6, f"{per_scope * 1e9:.0f} ns per scope"
