"""experiments/study.py's study.json: what a committed study folder says about its tuning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from scripts import experiment

from meta.config import retired
from meta.observe.machine import cpu_kind, cpu_model

STAGES = ("train", "eval")

ROOT = Path(__file__).resolve().parents[2]


def _describe(config: str) -> dict:
    study = OmegaConf.to_container(OmegaConf.load(ROOT / "experiments" / "archive" / config))
    return experiment("study").describe(study, [0, 1, 2, 3, 4], ["a", "a_fomaml"], 61.4)


def test_a_search_study_records_its_trials_per_start_and_its_selection_split():
    record = _describe("hidden_goal_small_search.yaml")
    assert record["search_trials_per_start"] == 16
    assert record["first_trial_is_the_runs_procedure"] is False
    assert "grid" not in record
    assert record["selection_split"] == "validation"
    assert record["meta_training_seeds"] == [0, 1, 2, 3, 4]
    assert record["wall_seconds"] == 61


def test_a_grid_study_records_its_procedures_instead():
    record = _describe("hidden_goal_small_batched.yaml")
    assert "search_trials_per_start" not in record
    assert record["grid"].count("{") == 5  # the five procedures listed
    assert record["selection_split"] == "train"


def test_a_study_records_each_stage_and_the_cpu_it_ran_on():
    study = OmegaConf.to_container(
        OmegaConf.load(ROOT / "experiments" / "archive" / "hidden_goal_small.yaml")
    )
    stages = {"meta_train": 140.6, "meta_eval": 2169.2}
    record = experiment("study").describe(study, [0], ["a"], 2310.4, stages)
    assert (record["meta_train_seconds"], record["meta_eval_seconds"]) == (141, 2169)
    assert record["wall_seconds"] == 2310
    assert record["cpu"] == cpu_model() != "unknown"
    assert record["cpu_kind"] == cpu_kind() != record["cpu"]
    assert not {"cpu", "cpu_kind"} & set(_describe("hidden_goal_small_search.yaml"))  # no stages


def test_a_variants_override_replaces_the_one_of_its_key_and_adds_the_others():
    overridden = experiment("study").overridden
    assert overridden(["a=1", "b=2"], ["b=3", "c=4"]) == ["a=1", "b=3", "c=4"]


@pytest.mark.parametrize(
    ("variant", "ran_retired_keys"),
    [("hidden_goal_half_horizon", True), ("hidden_rotation_half_horizon", False)],
)
def test_a_variant_resolves_to_the_configuration_its_committed_study_ran(
    variant: str, ran_retired_keys: bool
):
    study = experiment("study").load_study(ROOT / "experiments" / f"{variant}.yaml")
    record = json.loads((ROOT / "experiments" / variant / "study.json").read_text())
    ran = [[o for o in record[stage] if retired.in_overrides([o]) is None] for stage in STAGES]
    assert [list(study[stage]) for stage in STAGES] == ran  # the keys that are gone left out
    # committed before keys it named were retired (runtime=batched), or rerun after
    left_out = any(len(r) < len(record[s]) for r, s in zip(ran, STAGES, strict=True))
    assert left_out == ran_retired_keys
    assert (study.run_id, study.copy_to, study.smoke.run_id) == (
        record["run_id"],
        variant,
        f"{record['run_id']}_smoke",
    )
    assert not study.get("eval_id") and not study.smoke.get("eval_id")
