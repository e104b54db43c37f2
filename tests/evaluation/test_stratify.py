"""eval.stratify: each split's tasks drawn in turn from its patches, not uniformly."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

import envs
from envs.constants import BEHAVIOR_NAME
from meta.config import Config, TaskConfig
from meta.config.evaluation import EvalConfig
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.adapt import Setting
from meta.evaluation.tasks import sample_tasks

HIDDEN_GOAL = {"hidden_goal": 1, "motor_rotation": 0, "agent_speed": 0.2}
SPLITS = ["validation", "test", "train"]


def tasks(count: int, stratify: bool, seed: int = 0) -> dict:
    """meta-eval's tasks of the hidden-goal family, `count` per split."""
    run = Config()
    run = replace(run, meta=replace(run.meta, tasks=[TaskConfig("FindTarget", 1.0, HIDDEN_GOAL)]))
    ev = EvalConfig(tasks_per_family=count, stratify=stratify, splits=SPLITS)
    return sample_tasks(
        Setting(run, ev, seed=seed), parse_environment_parameters({}, [BEHAVIOR_NAME])
    )


def patch_of(split: str, params: dict[str, float]) -> tuple[int, ...]:
    """Which interval of each of the goal's coordinates the task lies in."""
    ranges = envs.family("FindTarget").ranges("test" if split == "test" else "train")
    return tuple(
        next(i for i, (low, high) in enumerate(ranges[name]) if low <= params[name] < high)
        for name in ("goal_x", "goal_y")
    )


@pytest.mark.parametrize("seed", [0, 3])
def test_every_patch_gets_the_same_number_of_tasks_within_one(seed: int) -> None:
    drawn = tasks(20, stratify=True, seed=seed)
    for split, patches in (("train", 9), ("validation", 9), ("test", 4)):
        jobs = drawn["FindTarget", split]
        counts = Counter(patch_of(split, j.task.params) for j in jobs)
        assert len(counts) == patches
        assert max(counts.values()) - min(counts.values()) <= 1
        for job in jobs:
            assert {k: job.task.params[k] for k in HIDDEN_GOAL} == HIDDEN_GOAL


def test_uniform_draws_leave_patches_uneven_where_stratified_ones_do_not() -> None:
    uniform = Counter(
        patch_of("train", j.task.params) for j in tasks(9, False)["FindTarget", "train"]
    )
    stratified = tasks(9, True)["FindTarget", "train"]
    assert max(uniform.values()) > 1
    assert Counter(patch_of("train", j.task.params) for j in stratified) == Counter(
        {p: 1 for p in {(x, y) for x in range(3) for y in range(3)}}
    )


def test_stratified_draws_are_a_function_of_the_seed() -> None:
    def params(seed: int) -> list[dict[str, float]]:
        return [j.task.params for j in tasks(9, True, seed)["FindTarget", "validation"]]

    assert params(1) == params(1)
    assert params(1) != params(2)


def test_patches_cover_the_parameters_a_run_does_not_fix() -> None:
    family = envs.family("FindTarget")
    assert len(family.patches("train")) == 9
    assert len(family.patches("test")) == 16
    assert len(family.patches("test", HIDDEN_GOAL)) == 4
    assert family.patches("train", ["goal_x", "goal_y"]) == [{}]


def test_too_few_tasks_for_the_patches_are_refused() -> None:
    with pytest.raises(ValueError, match=r"eval\.stratify: eval\.tasks_per_family=8 .* 9 "):
        tasks(8, stratify=True)
