"""A run's timers: nesting and counts as the inner PPO uses them, timers.json read back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from mlagents_envs.timers import get_timer_tree

from meta.algorithm.ppo.rollout import Timers
from meta.observe.timers import RunTimers


def _check_totals(node: dict[str, Any]) -> None:
    children = node.get("children", {})
    assert sum(c["total"] for c in children.values()) <= node["total"] + 1e-9
    assert node["self"] >= 0.0
    for child in children.values():
        _check_totals(child)


def _inner_training(timers: Timers, steps: int) -> None:
    """The scopes a Collector and a training request open, in their order."""
    with timers.scope("inner_training"):
        for _ in range(steps):
            with timers.scope("policy_forward"):
                pass
            with timers.scope("env_step"):
                time.sleep(0.001)
        with timers.scope("update"):
            pass


def test_nested_scopes_are_written_as_ml_agents_timers_json(tmp_path: Path) -> None:
    timers = RunTimers()
    for _ in range(3):
        with timers.scope("meta_step"):
            _inner_training(timers, 4)
            with timers.scope("commit"), timers.scope("checkpoint"):
                pass
    path = tmp_path / "run_logs" / "timers.json"
    timers.write(path)

    tree = json.loads(path.read_text())
    assert [p.name for p in path.parent.iterdir()] == ["timers.json"]
    assert tree["name"] == "root" and tree["count"] == 1
    meta = tree["metadata"]
    assert meta["timer_format_version"] == "0.1.0"
    for key in (
        "start_time_seconds",
        "end_time_seconds",
        "python_version",
        "command_line_arguments",
        "mlagents_envs_version",
        "pytorch_version",
        "numpy_version",
    ):
        assert isinstance(meta[key], str)
    step = tree["children"]["meta_step"]
    assert step["count"] == 3 and set(step["children"]) == {"inner_training", "commit"}
    inner = step["children"]["inner_training"]
    assert inner["count"] == 3
    assert set(inner["children"]) == {"policy_forward", "env_step", "update"}
    assert inner["children"]["env_step"]["count"] == 12
    assert inner["children"]["env_step"]["total"] >= 0.012
    assert "children" not in inner["children"]["update"]
    assert step["children"]["commit"]["children"]["checkpoint"]["count"] == 3
    _check_totals(tree)


def test_an_exception_inside_a_scope_is_timed_and_unwinds() -> None:
    timers = RunTimers()
    with pytest.raises(KeyError), timers.scope("outer"), timers.scope("failing"):
        raise KeyError("boom")
    with timers.scope("after"):
        pass
    children = timers.tree()["children"]
    assert set(children) == {"outer", "after"}
    assert children["outer"]["children"]["failing"]["count"] == 1


def test_two_runs_in_one_process_keep_their_own_trees() -> None:
    a, b = RunTimers(), RunTimers()
    with a.scope("meta_step"):
        _inner_training(b, 2)  # b's scopes open inside a's: they must not nest there
    assert set(a.tree()["children"]) == {"meta_step"}
    assert "children" not in a.tree()["children"]["meta_step"]
    assert set(b.tree()["children"]) == {"inner_training"}
    assert "meta_step" not in get_timer_tree().get("children", {}), "used the global stack"


def test_a_failed_write_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timers = RunTimers()
    path = tmp_path / "timers.json"
    timers.write(path)
    before = path.read_text()
    with timers.scope("meta_step"):
        pass

    def crash(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("meta.process.atomic.os.replace", crash)
    with pytest.raises(OSError, match="disk full"):
        timers.write(path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["timers.json"]
