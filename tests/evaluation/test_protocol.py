"""meta-eval's protocol: each start at its selected procedure, chosen never on test tasks."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from commandline import run_main
from once import MadeOnce
from tinyconfig import TINY, compose_config

from meta.config import Config
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.trainer import train

Factory = Callable[..., Config]
TINY_EVAL = [
    "eval.budgets=[0,1]",
    "eval.seeds=1",
    "eval.tasks_per_family=1",
    "eval.buffer_size=128",
    "eval.eval_episodes=4",
    "eval.bootstrap_samples=50",
]
ONE_FAMILY = ("meta.steps=1", "meta.tasks=[{name:FindTarget}]")
PROCEDURES = "eval.adaptation=[{},{optimizer:sgd,learning_rate:0.05,buffer_size:64}]"
JOINT = "eval.joint_ppo=[{},{optimizer:sgd,learning_rate:0.01}]"


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_every_start_adapts_on_test_with_the_procedure_selected_on_validation(
    tiny_config: Factory,
) -> None:
    train(tiny_config(*ONE_FAMILY), "r")
    train(tiny_config("meta=fomaml", *ONE_FAMILY, "meta.outer_lr=0.3"), "f")
    options = [*TINY_EVAL, PROCEDURES, JOINT, "eval.other_run_ids=[f]"]
    options += ["eval.splits=[test]", "eval.selection_split=validation"]
    cfg = tiny_config("run_id=r", *options, "eval.out_dir=${results_dir}/a")
    checked = plan_eval(cfg, "r")
    evaluate(checked)
    out = Path(cfg.results_dir) / "a"
    selection = read_csv(out / "selection.csv")
    starts = {(r["method"], r["pretraining"]) for r in selection}
    assert {m for m, _ in starts} == {"reptile", "fomaml", "scratch", "joint"}
    assert len([s for s in starts if s[0] == "joint"]) == 2  # one per pretraining
    # every start x procedure on the selection split, one selected per start (and family)
    assert len(selection) == 5 * 2 and {r["split"] for r in selection} == {"validation"}
    picked = {
        (r["family"], r["method"]): (r["pretraining"], r["adaptation"])
        for r in selection
        if r["selected"] == "True"
    }
    assert len(picked) == 4
    rows = read_csv(out / "adaptation.csv")
    assert {r["split"] for r in rows} == {"test"}
    for row in rows:  # test adapts with the selected procedure alone
        assert picked[row["family"], row["method"]] == (row["pretraining"], row["adaptation"])
    steps = read_csv(out / "steps_to_80.csv")
    for row in steps:
        assert picked[row["family"], row["method"]] == (row["pretraining"], row["adaptation"])
        assert row["selected_on"] == "validation"
    assert (Path(cfg.results_dir) / "r" / "eval" / "joint_sgd_lr0.01_buffer512").is_dir()

    # other test tasks: other test results, the same selection, byte for byte
    moved = {
        key: [
            replace(t, task=replace(t.task, params={**t.task.params, "motor_rotation": 170.0}))
            for t in tasks
        ]
        if key[1] == "test"
        else tasks
        for key, tasks in checked.tasks.items()
    }
    again = tiny_config("run_id=r", *options, "eval.out_dir=${results_dir}/b")
    changed = plan_eval(again, "r")
    changed.tasks = moved
    evaluate(changed)
    other = Path(cfg.results_dir) / "b"
    assert (other / "adaptation.csv").read_text() != (out / "adaptation.csv").read_text()
    assert (other / "selection.csv").read_text() == (out / "selection.csv").read_text()


def _train_r(root: Path) -> None:
    train(compose_config([*TINY, f"results_dir={root / 'results'}", *ONE_FAMILY]), "r")


@pytest.fixture(scope="module")
def trained(made_once: MadeOnce) -> Path:
    """The results directory of one tiny run, `r`, that the refusals below only read."""
    return made_once("protocol-run", _train_r) / "results"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.adaptation=[]"], "eval.adaptation is empty"),
        (["eval.adaptation=[{optimizer:rmsprop}]"], "eval.adaptation[0].optimizer: unknown"),
        (["eval.adaptation=[{learning_rate:0}]"], "eval.adaptation[0].learning_rate must be > 0"),
        (["eval.adaptation=[{},{learning_rate:-1}]"], "eval.adaptation[1].learning_rate must"),
        (["eval.adaptation=[{buffer_size:0}]"], "eval.adaptation[0].buffer_size must be > 0"),
        (["eval.adaptation=[{log_std:nan}]"], "eval.adaptation[0].log_std must be a finite"),
        (["eval.joint_ppo=[]"], "eval.joint_ppo is empty"),
        (["eval.joint_ppo=[{log_std:0.0}]"], "eval.joint_ppo[0].log_std: an adaptation setting"),
        (["eval.selection_split=test"], "eval.selection_split must be one of"),
        (["eval.joint_run_id=r", JOINT], "eval.joint_ppo (which trains one per entry)"),
        (["eval.reach=last"], "eval.reach must be one of ('first', 'sustained'), got 'last'"),
        (
            ["eval.adaptation=[{learning_rate_schedule:cosine}]"],
            "eval.adaptation[0].learning_rate_schedule: unknown schedule 'cosine'",
        ),
        (
            ["eval=search", "eval.search.learning_rate_schedule=[constant,cosine]"],
            "eval.search.learning_rate_schedule[1].learning_rate_schedule: unknown schedule",
        ),
    ],
)
def test_bad_procedures_are_one_line_exit_2_and_write_nothing(
    trained: Path, tmp_path: Path, overrides: list[str], message: str
) -> None:
    results = trained
    before = sorted(p.relative_to(results) for p in results.rglob("*"))
    done = run_main("meta-eval", "run_id=r", f"results_dir={results}", *overrides, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("meta-eval: error: ") and message in lines[0]
    assert sorted(p.relative_to(results) for p in results.rglob("*")) == before
