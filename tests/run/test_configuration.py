"""meta/run/configuration.py: a resumed run keeps its configuration; changes refused or recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meta.run.configuration import (
    HISTORY_FILE,
    ConfigurationDrift,
    changeable,
    flatten,
    reconcile,
    record_changes,
)

SAVED = {
    "run_id": "r",
    "seed": 3,
    "results_dir": "out",
    "meta": {"steps": 20, "outer_lr": 0.5},
    "ppo": {"learning_rate": 0.0003},
    "network": {"hidden_units": 64},
    "logger": {"console": True, "wandb": False},
}


def _given(**changes: object) -> dict:
    given = json.loads(json.dumps(SAVED))
    for key, value in changes.items():
        *parents, leaf = key.split("__")
        node = given
        for part in parents:
            node = node[part]
        node[leaf] = value
    return given


def test_flatten_and_changeable() -> None:
    assert flatten({"a": {"b": 1, "c": {}}, "d": [1]}) == {"a.b": 1, "a.c": {}, "d": [1]}
    assert changeable("meta.steps") and changeable("logger.wandb") and changeable("eval.seeds")
    assert not changeable("meta.outer_lr") and not changeable("seed")


def test_keys_not_on_the_command_line_keep_the_saved_values() -> None:
    defaults = _given(meta__steps=100, network__hidden_units=128, seed=0)
    merged, changes = reconcile(SAVED, defaults, touched=["run_id", "resume"])
    assert merged == SAVED and changes == {}


def test_changed_fixed_keys_are_refused_naming_each() -> None:
    given = _given(seed=4, network__hidden_units=128, meta__steps=40)
    with pytest.raises(ConfigurationDrift) as info:
        reconcile(SAVED, given, touched=["seed", "network.hidden_units", "meta.steps"])
    message = str(info.value)
    assert "seed (3 -> 4)" in message and "network.hidden_units (64 -> 128)" in message
    assert "meta.steps" not in message and "\n" not in message


def test_a_group_override_covers_its_keys() -> None:
    given = _given(network__hidden_units=32)
    with pytest.raises(ConfigurationDrift, match=r"network\.hidden_units"):
        reconcile(SAVED, given, touched=["network"])


def test_changeable_keys_are_taken_and_same_values_pass() -> None:
    given = _given(meta__steps=40, logger__wandb=True, seed=3)
    merged, changes = reconcile(SAVED, given, touched=["meta.steps", "logger", "seed"])
    assert merged["meta"]["steps"] == 40 and merged["logger"]["wandb"] is True
    assert changes == {"meta.steps": (20, 40), "logger.wandb": (False, True)}
    assert SAVED["meta"]["steps"] == 20  # the saved mapping is not modified


def test_control_keys_never_count_as_drift() -> None:
    given = _given(results_dir="elsewhere", run_id="r")
    merged, changes = reconcile(SAVED, given, touched=["results_dir", "run_id"])
    assert changes == {} and merged["results_dir"] == "out"


def test_history_records_each_change_with_its_meta_step(tmp_path: Path) -> None:
    record_changes(tmp_path, 7, {"meta.steps": (20, 40)})
    record_changes(tmp_path, 7, {})
    record_changes(tmp_path, 12, {"logger.wandb": (False, True)})
    history = json.loads((tmp_path / HISTORY_FILE).read_text())
    assert [h["meta_step"] for h in history] == [7, 12]
    assert history[0]["changes"] == {"meta.steps": {"from": 20, "to": 40}}
