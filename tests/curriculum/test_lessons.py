"""Environment parameters: ML-Agents' lesson rules by hand, resume, YAML and Hydra files, errors."""

from __future__ import annotations

import copy
import io
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from meta.curriculum.lessons import EnvironmentParameters, parse_environment_parameters
from meta.curriculum.samplers import ConstantSampler, UniformSampler
from meta.curriculum.settings import CompletionCriteria

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
BRAIN = ["Brain"]


def criteria(**fields: Any) -> dict[str, Any]:
    return {"behavior": "Brain", **fields}


def curriculum(*lessons: tuple[Any, dict[str, Any] | None]) -> dict[str, Any]:
    """A curriculum of lessons L0, L1, ... from (value, completion_criteria) pairs."""
    out = []
    for i, (value, crit) in enumerate(lessons):
        lesson: dict[str, Any] = {"name": f"L{i}", "value": value}
        if crit is not None:
            lesson["completion_criteria"] = crit
        out.append(lesson)
    return {"curriculum": out}


def reward_curriculum(**fields: Any) -> EnvironmentParameters:
    crit = criteria(measure="reward", **fields)
    return parse_environment_parameters(
        {"p": curriculum((0.0, crit), (1.0, crit), (2.0, None))}, BRAIN
    )


def smoothed(params: EnvironmentParameters) -> float:
    return params.state_dict()["smoothed_values"]["p"]


# --- completion criteria, worked by hand -------------------------------------------------------


def test_reward_smoothing_sequence() -> None:
    params = reward_curriculum(threshold=0.55)
    # smoothed = 0.25 * previous + 0.75 * mean, starting from 0.0:
    assert params.update(0.0, {"Brain": [0.4]}) == {}  # 0.75 * 0.4 = 0.3
    assert smoothed(params) == pytest.approx(0.3)
    assert params.update(0.0, {"Brain": [0.6]}) == {}  # 0.075 + 0.45 = 0.525 <= 0.55
    assert smoothed(params) == pytest.approx(0.525)
    # Unsmoothed, 0.6 > 0.55 would have advanced already.
    assert params.update(0.0, {"Brain": [0.6]}) == {"p": 1}  # 0.13125 + 0.45 = 0.58125
    assert smoothed(params) == pytest.approx(0.58125)
    assert params.lesson_names() == {"p": "L1"}


def test_threshold_equality_does_not_advance() -> None:
    # ML-Agents compares with a strict `>`; these values are exact in binary.
    params = reward_curriculum(threshold=0.375)
    assert params.update(0.0, {"Brain": [0.5]}) == {}  # 0.75 * 0.5 = 0.375, not > 0.375
    assert smoothed(params) == 0.375
    assert params.update(0.0, {"Brain": [0.5]}) == {"p": 1}  # 0.09375 + 0.375 = 0.46875

    unsmoothed = reward_curriculum(threshold=0.5, signal_smoothing=False)
    assert unsmoothed.update(0.0, {"Brain": [0.5]}) == {}
    assert unsmoothed.update(0.0, {"Brain": [0.75]}) == {"p": 1}
    assert smoothed(unsmoothed) == 0.0

    crit = criteria(measure="progress", threshold=0.5)
    by_progress = parse_environment_parameters({"p": curriculum((0.0, crit), (1.0, None))}, BRAIN)
    assert by_progress.update(0.5, {}) == {}
    assert by_progress.update(np.nextafter(0.5, 1.0), {}) == {"p": 1}


def test_min_lesson_length_counts_data_points_and_averages_the_last_ones() -> None:
    params = reward_curriculum(threshold=0.0, min_lesson_length=3, signal_smoothing=False)
    assert params.update(0.0, {"Brain": [1.0]}) == {}  # 1 point < 3
    assert params.update(0.0, {"Brain": [1.0]}) == {}  # 2 points < 3
    assert params.update(0.0, {"Brain": [1.0]}) == {"p": 1}  # mean 1.0 > 0
    # The buffer restarts with the lesson and keeps the last 3 points.
    assert params.update(0.0, {"Brain": [-1.0, -1.0, -1.0]}) == {}  # mean -1
    assert params.update(0.0, {"Brain": [1.0, 1.0]}) == {"p": 2}  # [-1, 1, 1]: mean 1/3 > 0


def test_smoothing_waits_for_min_lesson_length_and_persists_across_lessons() -> None:
    params = reward_curriculum(threshold=0.5, min_lesson_length=2)
    params.update(0.0, {"Brain": [1.0]})
    assert smoothed(params) == 0.0  # not enough points: nothing measured
    assert params.update(0.0, {"Brain": [1.0]}) == {"p": 1}  # 0.75 * 1.0 = 0.75
    params.update(0.0, {"Brain": [0.0]})
    assert smoothed(params) == 0.75  # buffer was cleared: 1 point < 2
    assert params.update(0.0, {"Brain": [0.0]}) == {}  # 0.25 * 0.75 + 0 = 0.1875
    assert smoothed(params) == 0.1875


def test_progress_also_waits_for_min_lesson_length() -> None:
    crit = criteria(measure="progress", threshold=0.5, min_lesson_length=2)
    params = parse_environment_parameters({"p": curriculum((0.0, crit), (1.0, None))}, BRAIN)
    assert params.update(0.9, {"Brain": [0.0]}) == {}
    assert params.update(0.9, {"Brain": [0.0]}) == {"p": 1}


def test_at_most_one_lesson_per_update_and_last_lesson_stays() -> None:
    params = parse_environment_parameters(
        {
            "p": curriculum(
                (0.0, criteria(measure="progress", threshold=0.1)),
                (1.0, criteria(measure="progress", threshold=0.2)),
                (2.0, None),
            )
        },
        BRAIN,
    )
    assert [params.update(1.0, {}) for _ in range(3)] == [{"p": 1}, {"p": 2}, {}]
    assert params.lesson_nums() == {"p": 2}


def test_any_lesson_change_clears_every_reward_buffer() -> None:
    raw = {
        "a": curriculum((0.0, criteria(measure="progress", threshold=0.5)), (1.0, None)),
        "b": curriculum((0.0, criteria(threshold=0.0, min_lesson_length=2)), (1.0, None)),
    }
    params = parse_environment_parameters(raw, BRAIN)
    assert params.update(0.9, {"Brain": [1.0]}) == {"a": 1}
    assert params.update(0.9, {"Brain": [1.0]}) == {}  # b sees 1 point, not 2
    assert params.update(0.9, {"Brain": [1.0]}) == {"b": 1}


def test_nan_mean_reward_never_advances() -> None:
    params = reward_curriculum(threshold=-1.0)
    assert params.update(0.0, {"Brain": [float("nan")]}) == {}
    assert smoothed(params) == 0.0


def test_last_lesson_criteria_are_ignored_with_a_warning() -> None:
    crit = criteria(measure="progress", threshold=0.0)
    with pytest.warns(UserWarning, match="last lesson's completion_criteria is ignored"):
        params = parse_environment_parameters({"p": curriculum((0.0, crit), (1.0, crit))}, BRAIN)
    assert params.update(1.0, {}) == {"p": 1}
    assert params.update(1.0, {}) == {}


def test_need_increment_is_ml_agents_formula() -> None:
    crit = CompletionCriteria(behavior="Brain", measure="reward", threshold=0.0)
    assert crit.need_increment(0.0, [0.2, 0.6], 0.4) == (
        True,
        pytest.approx(0.25 * 0.4 + 0.75 * 0.4),
    )
    assert crit.need_increment(0.0, [], 0.4) == (False, 0.4)


def test_unknown_behavior_in_rewards() -> None:
    with pytest.raises(ValueError, match=r"^rewards: unknown behavior 'Other'"):
        reward_curriculum().update(0.0, {"Other": [1.0]})


# --- sampling, lessons and resume ----------------------------------------------------------------

MIXED: dict[str, Any] = {
    "constant": 2.0,
    "free": {"sampler_type": "uniform", "sampler_parameters": {"min_value": 0, "max_value": 1}},
    "seeded": {
        "sampler_type": "gaussian",
        "sampler_parameters": {"mean": 0, "st_dev": 1, "seed": 11},
    },
    "arena": curriculum(
        (
            {
                "sampler_type": "uniform",
                "sampler_parameters": {"min_value": 1, "max_value": 2, "seed": 5},
            },
            criteria(measure="reward", threshold=0.5, min_lesson_length=2),
        ),
        (
            {
                "sampler_type": "multirangeuniform",
                "sampler_parameters": {"intervals": [[3, 4], [6, 8]]},
            },
            criteria(measure="progress", threshold=0.9),
        ),
        (10.0, None),
    ),
}


def test_sample_uses_current_lesson_and_seeded_generators() -> None:
    params = parse_environment_parameters(MIXED, BRAIN)
    rng = np.random.default_rng(0)
    first = params.sample(rng)
    assert list(first) == ["constant", "free", "seeded", "arena"]
    assert first["constant"] == 2.0 and 1.0 <= first["arena"] <= 2.0
    assert first["free"] == np.random.default_rng(0).uniform(0, 1)  # the run's generator
    assert first["seeded"] == np.random.default_rng(11).normal(0, 1)  # its own, as ML-Agents'
    # Another run generator changes the free draws only.
    other = parse_environment_parameters(MIXED, BRAIN).sample(np.random.default_rng(99))
    assert other["seeded"] == first["seeded"] and other["arena"] == first["arena"]
    assert other["free"] != first["free"]

    params.set_lesson_nums({"arena": 2})
    assert params.sample(rng)["arena"] == 10.0
    assert params.lesson_names()["arena"] == "L2" and params.lesson_names()["free"] == "free"


def test_settings_are_frozen_dataclasses() -> None:
    settings = parse_environment_parameters(MIXED, BRAIN).settings
    assert settings["constant"].lessons[0].value == ConstantSampler(2.0)
    assert settings["arena"].lessons[0].value == UniformSampler(1.0, 2.0, seed=5)
    with pytest.raises(AttributeError):
        settings["arena"].lessons[0].name = "x"  # type: ignore[misc]


def plain(value: Any) -> bool:
    """Whether `value` holds only what torch.load(weights_only=True) and JSON-like stores keep."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return isinstance(value, bool | int | float | str) or value is None


def advance(
    params: EnvironmentParameters, rng: np.random.Generator, start: int, stop: int
) -> list[Any]:
    """Meta-steps start..stop-1 of 12: sample, then update with one reward data point."""
    trace = []
    for k in range(start, stop):
        values = params.sample(rng)
        changed = params.update((k + 1) / 12, {"Brain": [values["free"]]})
        trace.append((values, changed))
    return trace


def test_state_dict_resume_is_bitwise() -> None:
    params = parse_environment_parameters(MIXED, BRAIN)
    rng = np.random.default_rng(3)
    advance(params, rng, 0, 3)
    state = params.state_dict()
    assert plain(state)
    assert state["reward_buffers"]["Brain"] and state["smoothed_values"]["arena"] > 0.0
    expected = advance(copy.deepcopy(params), copy.deepcopy(rng), 3, 12)

    resumed = parse_environment_parameters(MIXED, BRAIN)
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert resumed.lesson_nums() == params.lesson_nums()
    assert resumed.state_dict() == state
    assert advance(resumed, copy.deepcopy(rng), 3, 12) == expected
    # The resumed part crosses both lesson changes (reward, then progress).
    assert [changed for _, changed in expected if changed] == [{"arena": 1}, {"arena": 2}]


def test_state_dict_survives_torch_weights_only() -> None:
    torch = pytest.importorskip("torch")
    params = parse_environment_parameters(MIXED, BRAIN)
    advance(params, np.random.default_rng(1), 0, 3)
    buffer = io.BytesIO()
    torch.save({"curriculum": params.state_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["curriculum"]
    assert loaded == params.state_dict()


def test_load_state_dict_rejects_other_settings() -> None:
    params = parse_environment_parameters(MIXED, BRAIN)
    with pytest.raises(
        ValueError, match=r"^lesson_nums\.arena: expected a lesson index in \[0, 3\)"
    ):
        params.load_state_dict({"lesson_nums": {"arena": 3}})
    with pytest.raises(
        ValueError, match=r"^state\.smoothed_values: unknown environment parameter 'x'"
    ):
        params.load_state_dict({"smoothed_values": {"x": 0.0}})
    with pytest.raises(ValueError, match=r"^state\.generators: no seeded sampler 'free/0'"):
        params.load_state_dict({"generators": {"free/0": {}}})
    with pytest.raises(ValueError, match=r"^lesson_nums: unknown environment parameter 'x'"):
        params.set_lesson_nums({"x": 0})
    with pytest.raises(ValueError, match=r"^lesson_nums\.arena: expected .* got True$"):
        params.set_lesson_nums({"arena": True})
    params.set_lesson_nums({"arena": np.int64(1)})
    assert params.lesson_nums()["arena"] == 1 and type(params.lesson_nums()["arena"]) is int
    params.set_lesson_nums({"arena": 0})
    assert params.lesson_nums()["arena"] == 0


# --- YAML: ML-Agents' own style, and our Hydra group files --------------------------------------


def test_ml_agents_yaml_loads_unchanged() -> None:
    config = yaml.safe_load((DATA / "mlagents_env_params.yaml").read_text())
    params = parse_environment_parameters(
        config["environment_parameters"], list(config["behaviors"])
    )
    assert params.lesson_names() == {
        "my_environment_parameter": "my_environment_parameter",
        "gravity": "gravity",
        "mass": "mass",
        "length": "length",
        "scale": "scale",
        "friction": "friction",
        "wall_height": "MyFirstLesson",
        "goal_distance": "Lesson0",
    }
    wall = params.settings["wall_height"].lessons[1].completion_criteria
    assert wall == CompletionCriteria("my_behavior", "reward", 0.6, 100, True, True)
    goal = params.settings["goal_distance"].lessons[0].completion_criteria
    assert goal == CompletionCriteria("my_behavior", "reward", 0.1, 0, True, False)
    values = params.sample(np.random.default_rng(0))
    assert values["my_environment_parameter"] == 3.0 and values["gravity"] == -9.0
    assert 7 <= values["length"] <= 10 or 15 <= values["length"] <= 20

    via_omegaconf = OmegaConf.to_container(OmegaConf.load(DATA / "mlagents_env_params.yaml"))
    assert isinstance(via_omegaconf, dict)
    again = parse_environment_parameters(via_omegaconf["environment_parameters"], ["my_behavior"])
    assert again.settings == params.settings


def test_hydra_group_files_compose_under_environment_parameters(tmp_path: Path) -> None:
    hydra = pytest.importorskip("hydra")
    shutil.copytree(ROOT / "conf" / "environment_parameters", tmp_path / "environment_parameters")
    (tmp_path / "config.yaml").write_text(
        "defaults:\n  - environment_parameters: none\n  - _self_\n"
    )
    with hydra.initialize_config_dir(version_base=None, config_dir=str(tmp_path)):
        empty = hydra.compose("config")
        arena = hydra.compose("config", overrides=["environment_parameters=arena_curriculum"])
    assert OmegaConf.to_container(empty.environment_parameters) == {}
    assert parse_environment_parameters({}, BRAIN).sample(np.random.default_rng(0)) == {}

    raw = OmegaConf.to_container(arena.environment_parameters)
    assert isinstance(raw, dict)
    params = parse_environment_parameters(raw, BRAIN)
    assert params.lesson_names() == {"arena_size": "SmallArena", "motor_rotation": "motor_rotation"}
    measures = [lesson.completion_criteria for lesson in params.settings["arena_size"].lessons]
    assert [c.measure if c else None for c in measures] == ["progress", "reward", None]
    assert params.update(0.25, {}) == {"arena_size": 1}


# --- bad input: a one-line ValueError naming the problem ---------------------------------------

GOOD_CRIT = criteria(measure="progress", threshold=0.5)
EP = r"^environment_parameters\."


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"p": curriculum((0.0, None), (1.0, None))},
            EP + r"p\.curriculum\[0\] \('L0'\): a lesson other than the last needs completion_",
        ),
        (
            {"p": curriculum((0.0, criteria(measure="steps")), (1.0, None))},
            EP
            + r"p\.curriculum\[0\] \('L0'\)\.completion_criteria\.measure: unknown measure 'steps'",
        ),
        (
            {"p": curriculum((0.0, criteria(behavior="Walker")), (1.0, None))},
            r"completion_criteria\.behavior: 'Walker' is not a behavior of this run \['Brain'\]$",
        ),
        (
            {"p": curriculum((0.0, {"measure": "reward"}), (1.0, None))},
            r"\('L0'\)\.completion_criteria: missing behavior$",
        ),
        (
            {"p": curriculum((0.0, criteria(measure="progress", threshold=1.5)), (1.0, None))},
            r"completion_criteria\.threshold: 1\.5 is never reached: progress is in \[0, 1\]$",
        ),
        (
            {"p": curriculum((0.0, criteria(measure="progress", threshold=-0.1)), (1.0, None))},
            r"completion_criteria\.threshold: -0\.1 is never reached",
        ),
        (
            {"p": curriculum((0.0, criteria(min_lesson_length=-1)), (1.0, None))},
            r"completion_criteria\.min_lesson_length: must be >= 0, got -1$",
        ),
        (
            {"p": curriculum((0.0, criteria(signal_smoothing="yes")), (1.0, None))},
            r"completion_criteria\.signal_smoothing: expected true or false, got 'yes'$",
        ),
        (
            {"p": curriculum((0.0, criteria(thresold=0.5)), (1.0, None))},
            r"completion_criteria: unknown key 'thresold'",
        ),
        (
            {
                "p": curriculum(
                    (
                        {
                            "sampler_type": "uniform",
                            "sampler_parameters": {"min_value": 3, "max_value": 1},
                        },
                        GOOD_CRIT,
                    ),
                    (1.0, None),
                )
            },
            EP
            + r"p\.curriculum\[0\] \('L0'\)\.value\.sampler_parameters: min_value 3\.0 is greater",
        ),
        (
            {"p": {"sampler_type": "normal", "sampler_parameters": {}}},
            EP + r"p\.sampler_type: unknown 'normal'",
        ),
        (
            {"p": {"sampler_type": "uniform", "sampler_parameters": {"max_value": -1}}},
            EP + r"p\.sampler_parameters: min_value 0\.0 is greater than max_value -1\.0$",
        ),
        ({"p": {**curriculum((0.0, None)), "seed": 1}}, EP + r"p: unknown key 'seed'"),
        ({"p": {"curriculum": []}}, EP + r"p\.curriculum: expected a non-empty list of lessons$"),
        (
            {"p": {"curriculum": [{"name": "L0", "value": 1.0, "completion": GOOD_CRIT}]}},
            EP + r"p\.curriculum\[0\]: unknown key 'completion'",
        ),
        (
            {"p": {"curriculum": [{"Lesson0": {"value": 1.0}}]}},
            EP + r"p\.curriculum\[0\]: unknown key 'Lesson0'",
        ),
        (
            {"p": {"curriculum": [{"name": "L0"}]}},
            EP + r"p\.curriculum\[0\]: lesson is missing value$",
        ),
        (
            {"p": {"curriculum": [{"value": 1.0}]}},
            EP + r"p\.curriculum\[0\]: lesson is missing name$",
        ),
        ({"p": "big"}, EP + r"p: expected a number or a mapping"),
        ([1.0], r"^environment_parameters: expected a mapping"),
    ],
)
def test_bad_input_is_a_one_line_value_error(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        parse_environment_parameters(raw, BRAIN)
    assert "\n" not in str(error.value)


def test_none_is_no_parameters() -> None:
    params = parse_environment_parameters(None, BRAIN)
    assert params.lesson_nums() == {} and params.update(1.0, {"Brain": [1.0]}) == {}
