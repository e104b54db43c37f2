"""envs/tasks/family.py and envs/__init__.py: parameters, validation, ranges, the registry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import envs
from envs.tasks.family import Family
from envs.tasks.find_target import FindTargetCore, FindTargetParams


def _one_line_error(fn, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_registry_and_unknown_task() -> None:
    assert envs.BEHAVIOR_NAME == "Brain"
    assert list(envs.FAMILIES) == ["FindTarget", "CarryObject", "Sumo"]
    assert envs.family("CarryObject") is envs.FAMILIES["CarryObject"]
    assert "Nope" in _one_line_error(envs.family, "Nope")
    assert "Nope" in _one_line_error(envs.make, "Nope")


@pytest.mark.integration
def test_import_envs_does_not_load_mlagents_or_torch() -> None:
    code = (
        "import sys, envs; print(sorted(m for m in sys.modules "
        "if m.startswith(('mlagents_envs', 'torch'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


def test_defaults() -> None:
    assert envs.family("FindTarget").validate({}).as_dict() == {
        "arena_size": 10.0,
        "agent_speed": 0.2,
        "target_radius": 1.0,
        "max_step": 100.0,
        "shaping": 1.0,
        "motor_rotation": 0.0,
        "hidden_velocity": 0.0,
        "hidden_goal": 0.0,
        "goal_x": 0.5,
        "goal_y": 0.5,
    }
    carry = envs.family("CarryObject").validate({}).as_dict()
    assert carry["max_step"] == 200.0 and carry["carry_speed"] == 0.7
    assert carry["goal_radius"] == 1.25
    assert "hidden_goal" not in carry and "carry_speed" in envs.family("CarryObject").param_names


@pytest.mark.parametrize(
    ("name", "values", "named"),
    [
        ("FindTarget", {"arena_sise": 10}, "arena_sise"),
        ("FindTarget", {"arena_size": -1.0}, "arena_size"),
        ("FindTarget", {"agent_speed": 0.0}, "agent_speed"),
        ("FindTarget", {"max_step": 10.5}, "max_step"),
        ("FindTarget", {"max_step": 0}, "max_step"),
        ("FindTarget", {"hidden_goal": 2}, "hidden_goal"),
        ("FindTarget", {"shaping": float("nan")}, "shaping"),
        ("FindTarget", {"motor_rotation": "90"}, "motor_rotation"),
        ("FindTarget", {"target_radius": 3.0}, "target_radius"),
        ("FindTarget", {"carry_speed": 0.5}, "carry_speed"),
        ("CarryObject", {"carry_speed": 1.5}, "carry_speed"),
        ("CarryObject", {"goal_radius": 4.0, "arena_size": 12.0}, "goal_radius"),
        ("CarryObject", {"hidden_goal": 1}, "hidden_goal"),
    ],
)
def test_bad_parameters_raise_one_line_value_errors(name: str, values: dict, named: str) -> None:
    assert named in _one_line_error(envs.family(name).validate, values)
    assert named in _one_line_error(envs.make, name, **values)


def test_validate_merges_onto_base_and_accepts_numpy_numbers() -> None:
    family = envs.family("FindTarget")
    base = family.validate({"arena_size": 20.0})
    params = family.validate({"agent_speed": np.float32(0.5), "max_step": np.int64(7)}, base)
    assert isinstance(params, FindTargetParams)
    assert (params.arena_size, params.agent_speed, params.max_step) == (20.0, 0.5, 7.0)


@pytest.mark.parametrize("name", ["FindTarget", "CarryObject"])
def test_sample_params_stay_in_their_split_and_splits_are_disjoint(name: str) -> None:
    family = envs.family(name)
    assert "motor_rotation" in family.train_ranges
    for split in ("train", "test"):
        rng = np.random.default_rng(0)
        draws = [family.sample_params(rng, split) for _ in range(300)]
        assert draws[0] == family.sample_params(np.random.default_rng(0), split)
        for key, intervals in family.ranges(split).items():
            values = np.array([d[key] for d in draws])
            hits = [(values >= low) & (values < high) for low, high in intervals]
            assert np.logical_or.reduce(hits).all(), key
            assert all(hit.any() for hit in hits), key
        for draw in draws[:20]:
            family.validate(draw)
    train, test = family.ranges("train"), family.ranges("test")
    for key in train:
        for low, high in train[key]:
            assert all(high <= lo or hi <= low for lo, hi in test[key]), key
    assert "split" in _one_line_error(family.sample_params, np.random.default_rng(0), "val")


def test_family_rejects_overlapping_or_invalid_ranges() -> None:
    def build(train: tuple, test: tuple) -> Family:
        return Family("X", FindTargetParams, FindTargetCore, {"goal_x": train}, {"goal_x": test})

    assert "overlaps" in _one_line_error(build, ((-0.5, 0.5),), ((0.4, 0.9),))
    assert "invalid" in _one_line_error(build, ((-0.5, 0.5),), ((0.5, 1.5),))
    build(((-0.5, 0.5),), ((0.5, 0.9),))
