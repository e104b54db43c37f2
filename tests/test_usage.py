"""The help screens of meta-train and meta-eval, and the one-line "did you mean" of a typo."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
from commandline import run_main

from meta.cli import CONFIG_DIR, _hydra, _train, precheck, register_configs
from meta.usage import EVAL_HELP, eval_argv, help_screen, nearest_key, valid_keys, wrap_help


def _help(program: str, *args: str, columns: int = 80) -> str:
    """The help screen `program` prints in a terminal `columns` wide (in-process)."""
    done = run_main(program, *args, cwd=Path.cwd(), columns=columns)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_meta_train_help_says_what_it_does_lists_groups_keys_and_the_manual() -> None:
    text = _help("meta-train", "--help")
    assert text.startswith("meta-train: meta-learn one policy")
    assert "meta: fomaml, joint, reptile, single" in text and "runtime: local, ray" in text
    for shown in ("meta.steps=100", "ppo.learning_rate=0.0003", "env.num_areas=64", "--verbose"):
        assert shown in text, shown
    assert "docs/reference/configuration.md" in text and "powered by Hydra" not in text
    assert "meta.steps=7," in _help("meta-train", "meta.steps=7", "--help")  # the values in force


def test_meta_eval_has_its_own_help() -> None:
    text = _help("meta-eval", "--help")
    assert text.startswith("meta-eval: does a meta-learned start adapt faster?")
    assert "eval.seeds=5" in text and "eval.budgets=[0, 1, 2, 5, 10, 20]" in text
    assert "--verbose" in text and "meta-train [--verbose]" not in text


@pytest.mark.heavy  # eight help screens, each composing every group
@pytest.mark.parametrize("program", ["meta-train", "meta-eval"])
def test_help_screens_fit_80_columns_and_fold_long_values_between_words(program: str) -> None:
    long = ["results_dir=results/" + "x" * 50]  # a line of 90 columns, of words that fit 80
    if program == "meta-eval":
        long.append(f"eval.budgets=[{','.join(map(str, range(40)))}]")  # one of 160
    for args in (["--help"], [*long, "--help"]):
        narrow, wide = _help(program, *args), _help(program, *args, columns=1000)
        assert max(len(line) for line in narrow.splitlines()) <= 80, narrow
        assert narrow.split() == wide.split()  # the same words in order: none broken in two
    assert "eval=quick" in _help("meta-eval", "--help")
    assert "eval: quick" in _help("meta-train", "-h")


def test_wrap_help_folds_only_wide_lines_under_their_indent() -> None:
    text = "short\n  key=value, another_key=another_value, third=3\n"
    assert wrap_help(text, 80) == text
    folded = "short\n  key=value,\n    another_key=another_value,\n    third=3\n"
    assert wrap_help(text, 30) == folded
    assert wrap_help("  " + "x" * 40, 30) == "  " + "x" * 40  # a word wider than the line stays


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("meta.stpes=3", "did you mean meta.steps?"),
        ("stepz=3", "did you mean meta.steps?"),
        ("ppo.learnin_rate=1e-3", "did you mean ppo.learning_rate?"),
        ("env.num_area=3", "did you mean env.num_areas?"),
        ("meta=reptil", "did you mean meta=reptile?"),
    ],
)
def test_a_misspelled_key_gets_one_line_naming_the_nearest(
    override: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    register_configs()
    with pytest.raises(SystemExit) as exited:
        precheck("meta-train", [override])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("meta-train: error: ")
    assert err.rstrip().endswith(hint), err


def test_no_suggestion_when_nothing_is_near(capsys: pytest.CaptureFixture[str]) -> None:
    register_configs()
    with pytest.raises(SystemExit):
        precheck("meta-train", ["qqqqqqqq=1"])
    assert "did you mean" not in capsys.readouterr().err


def test_nearest_key_prefers_the_same_section() -> None:
    keys = valid_keys(CONFIG_DIR)
    assert {"meta.steps", "ppo.max_steps", "eval.seeds", "runtime.num_actors"} <= set(keys)
    assert nearest_key("ppo.max_step", keys) == "ppo.max_steps"
    assert nearest_key("meta.step", keys) == "meta.steps"


def test_meta_eval_selects_its_help_only_with_help() -> None:
    assert eval_argv(["run_id=r"]) == ["run_id=r"]
    assert eval_argv(["--help"]) == ["hydra/help=eval", "--help"]
    # before the flag: argparse takes the overrides only before or only after it
    assert eval_argv(["run_id=r", "-h"]) == ["hydra/help=eval", "run_id=r", "-h"]


@pytest.mark.heavy
@pytest.mark.parametrize(
    "argv",
    [["--help"], ["meta.steps=7", "-h"], [EVAL_HELP, "eval.budgets=[1,2]", "--help"]],
)
def test_our_help_screen_is_the_one_hydra_prints(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    register_configs()
    monkeypatch.setattr(sys, "argv", ["meta-train", *argv])
    with contextlib.suppress(SystemExit):
        _hydra(_train)()  # Hydra's own --help: it lists every group's options by composing
    assert help_screen(CONFIG_DIR, argv) + "\n" == capsys.readouterr().out


def test_a_bad_override_before_help_is_one_line_with_exit_code_2(tmp_path: Path) -> None:
    done = run_main("meta-train", "ppo.learnin_rate=3", "--help", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("meta-train: error: Could not override 'ppo.learnin_rate'")
    assert done.stderr.strip().endswith("did you mean ppo.learning_rate?")
