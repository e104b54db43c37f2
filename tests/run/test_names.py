"""Run ids are names; derived ones and printed commands read back through bash and Hydra."""

from __future__ import annotations

import subprocess

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from meta.run.names import (
    MAX_LENGTH,
    SAFE,
    RunIdError,
    check_name,
    command,
    derived_run_id,
    hydra_value,
)

NASTY = [
    "a'b",
    'a"b',
    "a\\b",
    "tr\\",
    "x,y=z",
    "a b",
    "[1,2]",
    "${x}",
    "true",
    "null",
    "123",
    "1e-3",
    "it's \\\\",
    "é",
    "a$b`c`",
    "!x",
    "reptile_meta.steps=50,seed=6",
]


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "empty"),
        ("..", "'.' and '..'"),
        (".", "'.' and '..'"),
        ("../escape", "path separator"),
        ("/an/absolute/path", "path separator"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        (".hidden", "starts with a dot"),
        ("a\tb", "control characters"),
        ("a\nb", "control characters"),
        ("x" * (MAX_LENGTH + 1), f"at most {MAX_LENGTH}"),
    ],
)
def test_a_run_id_that_is_not_a_name_is_refused_naming_the_rule(value: str, rule: str) -> None:
    with pytest.raises(RunIdError, match=r"eval\.joint_run_id=") as info:
        check_name(value, "eval.joint_run_id")
    assert rule in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["r", "reptile_meta.steps=50,seed=6", "a b", "x" * MAX_LENGTH])
def test_names_pass_as_they_are(value: str) -> None:
    assert check_name(value) == value


def _hydra_reads(override: str) -> object:
    """What `meta-train <override>` sets: Hydra's parse, then OmegaConf's resolution."""
    parsed = OverridesParser.create().parse_override(override)
    return OmegaConf.create({"value": parsed.value()}).value


@pytest.mark.parametrize("value", NASTY)
def test_hydra_reads_back_what_hydra_value_writes(value: str) -> None:
    assert _hydra_reads(f"run_id={hydra_value(value)}") == value


@pytest.mark.parametrize("value", NASTY)
def test_a_printed_command_pasted_into_bash_gives_hydra_the_value(value: str) -> None:
    printed = command("meta-train", run_id=value, resume=True)
    words = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {printed.removeprefix('meta-train ')}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(words) == 2 and words[1] == "resume=true", words
    assert _hydra_reads(words[0]) == value


SWEEP_JOBS = [
    ["meta.steps=50", "seed=6"],
    ["meta.steps=50", "seed=7"],
    ["meta.tasks=[{name: FindTarget, weight: 1.0}]", "seed=6"],
    ["meta.tasks=[{name: CarryObject, weight: 1.0}]", "seed=6"],
    ["meta.tasks=[{name: FindTarget, weight: 1.0}, {name: CarryObject, weight: 2.0}]"],
    ["logger.wandb_project='a b'"],
    ["logger.wandb_project='a_b'"],
    ['logger.wandb_project="x=y,z"'],
    ["logger.wandb_project=x_y_z"],
    ["+extra=1"],
    ["meta.outer_lr=" + "0" * 200],
    ["meta.outer_lr=" + "0" * 199 + "1"],
]


def test_derived_ids_are_safe_names_and_distinct_per_job() -> None:
    ids = [derived_run_id("reptile", job) for job in SWEEP_JOBS]
    assert len(set(ids)) == len(ids), ids
    for run_id in ids:
        assert SAFE.fullmatch(run_id) and check_name(run_id) == run_id
        assert hydra_value(run_id) == run_id  # an override value as it stands


def test_derived_ids_read_as_the_overrides_and_ignore_their_order() -> None:
    assert derived_run_id("reptile", ["seed=6", "meta.steps=50"]) == "reptile-meta.steps_50-seed_6"
    assert derived_run_id("joint", []) == "joint"
    lossy = derived_run_id("reptile", ["meta.tasks=[{name: FindTarget, weight: 1.0}]"])
    assert lossy.startswith("reptile-meta.tasks_name_FindTarget_weight_1.0-")
