"""hparams_search: the objective a trial returns, its checks before training, a real search.

A search's study is stored (SQLite under results_dir by default): interrupted, its trial is
failed and the same command continues it.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from commandline import run_main
from tinyconfig import compose_config

from meta.evaluation.metric import parse_metric, pooled_families
from meta.evaluation.objective import objective_value
from meta.evaluation.statistics import Measurement, iqm

optuna = pytest.importorskip("optuna")

MetaTrain = Callable[..., subprocess.CompletedProcess[str]]
SEARCH = ["hparams_search=reptile_optuna", "experiment=tiny", "logger=quiet"]
SMALL_EVAL = [
    "eval.budgets=[0,1]",
    "eval.seeds=2",
    "eval.tasks_per_family=1",
    "eval.buffer_size=256",
    "eval.eval_episodes=8",
    "optimized_metric=success_iqm@1",
]


def measured(success: dict[tuple[str, int, int, int], float]) -> list[Measurement]:
    """Measurements of `(family, task, seed, budget) -> success`, 256 env steps per update."""
    return [
        Measurement("reptile", family, "train", task, seed, budget, 256 * budget, 0.0, s, 4, "{}")
        for (family, task, seed, budget), s in success.items()
    ]


def test_the_objective_pools_families_and_counts_not_reached_beyond_the_last_budget() -> None:
    success = {
        (family, task, seed, budget): value
        for family, base in (("FindTarget", 0.2), ("CarryObject", 0.0))
        for task in (0, 1)
        for seed in (0, 1)
        for budget, value in ((0, base), (1, base + 0.1 * (task + seed)))
    }
    at_one = [v for (_, _, _, b), v in success.items() if b == 1]
    value = objective_value(measured(success), "success_iqm@1", [0, 1], samples=50)
    assert value == pytest.approx(float(iqm(at_one)))
    assert objective_value(measured(success), "neg_steps_to_80", [0, 1], samples=50) == -512
    reached = {k: 1.0 if k[3] == 1 else 0.0 for k in success}
    assert objective_value(measured(reached), "neg_steps_to_80", [0, 1], samples=50) == -256
    pooled = pooled_families(measured(success))
    assert {m.family for m in pooled} == {"all"} and len({m.task for m in pooled}) == 4


def test_the_objectives_steps_to_80_reads_the_curve_as_eval_reach_says() -> None:
    curve = (0.0, 0.9, 0.5, 0.9)  # crosses at 1 update, falls back, stays from 3
    wobbly = {
        ("FindTarget", task, seed, budget): value
        for task in (0, 1)
        for seed in (0, 1)
        for budget, value in enumerate(curve)
    }
    budgets = [0, 1, 2, 3]
    assert objective_value(measured(wobbly), "neg_steps_to_80", budgets, samples=50) == -256
    sustained = objective_value(measured(wobbly), "neg_steps_to_80", budgets, 50, "sustained")
    assert sustained == -768


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optimized_metric=bogus"], "optimized_metric: unknown 'bogus'"),
        (["optimized_metric=success_iqm@3"], "budget 3 is not among eval.budgets"),
        (["optimized_metric=success_iqm@1"], "never on 'test'; eval.splits is ['test', 'train']"),
    ],
)
def test_bad_objectives_are_refused(overrides: list[str], message: str) -> None:
    config = compose_config(overrides)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config.validate()
    assert parse_metric("neg_steps_to_80", []) == ("neg_steps_to_80", None)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optimized_metric=nope"], "meta-train: error: optimized_metric: unknown 'nope'"),
        (["eval.splits=[train,test]"], "is measured on tasks of the training distribution"),
    ],
)
def test_a_search_that_would_not_train_on_its_objective_stops_before_training(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    results = tmp_path / "search"
    done = run_main(
        "meta-train", *SEARCH, *SMALL_EVAL, *overrides, f"results_dir={results}", cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "meta-train" in line]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in done.stderr
    assert not [p for p in results.rglob("*") if p.is_file()]  # no run was started


@pytest.mark.slow
@pytest.mark.integration  # meta-train processes
def test_a_real_search_returns_its_objective_and_reads_as_a_sweep(
    meta_train: MetaTrain, tmp_path: Path
) -> None:
    results = tmp_path / "search"
    trials = ["hydra.sweeper.n_trials=2", "meta.steps=2", f"results_dir={results}"]
    # each trial's adaptations in two worker processes: the objective as a study computes it
    done = meta_train(*SEARCH, *SMALL_EVAL, *trials, "eval.workers=2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    best = yaml.safe_load((results / "optimization_results.yaml").read_text())
    assert set(best["best_params"]) == {"meta.outer_lr", "ppo.max_steps", "meta.meta_batch_size"}
    runs = sorted(p.parent.parent for p in results.glob("*/search/objective.json"))
    assert len(runs) == 2
    values = [json.loads((r / "search" / "objective.json").read_text())["value"] for r in runs]
    assert best["best_value"] == pytest.approx(max(values))
    for run in runs:
        with (run / "search" / "adaptation.csv").open() as file:
            assert {row["split"] for row in csv.DictReader(file)} == {"train"}
    report = subprocess.run(
        [str(Path(sys.executable).parent / "meta-report"), str(results), "--no-figure"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr
    assert "2 runs in 2 settings" in report.stdout
    # the training figure and the objective say what each measures, apart
    objective = "objective success_iqm@1: success IQM after 1 adaptation update from the run's"
    assert "training success (last 10)" in report.stdout and objective in report.stdout
    assert (
        "training reward, training success: the inner PPO trainings' own episodes"
        in (results / "report.md").read_text()
    )
    assert done.stdout.count("meta-train: objective success_iqm@1 = ") == 2
    with (results / "report.csv").open() as file:
        objectives = sorted(float(row["objective_iqm"]) for row in csv.DictReader(file))
    assert objectives == pytest.approx(sorted(values))


def trial_states(results: Path) -> list[str]:
    """The states of the stored study's trials, in order."""
    study = optuna.load_study(study_name="reptile_optuna", storage=f"sqlite:///{results}/optuna.db")
    return [trial.state.name for trial in study.trials]


@pytest.mark.slow
@pytest.mark.integration  # meta-train processes and a real signal
def test_an_interrupted_search_fails_its_trial_and_the_same_command_continues_it(
    meta_train: MetaTrain, tmp_path: Path
) -> None:
    results = tmp_path / "search"
    command = [*SEARCH, *SMALL_EVAL, "hydra.sweeper.n_trials=4", "meta.steps=2"]
    command.append("results_dir=search")  # relative: the study is found from the same place
    search = subprocess.Popen(
        [sys.executable, "-m", "meta", *command],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    assert search.stdout is not None
    lines = []
    for line in search.stdout:  # the trial it prints, then a real SIGTERM
        lines.append(line)
        if line.startswith("meta-train: trial 2 of study reptile_optuna"):
            search.send_signal(signal.SIGTERM)
    assert search.wait(timeout=300) == 143, "".join(lines)
    assert "marked failed in study reptile_optuna" in lines[-1]
    assert trial_states(results) == ["COMPLETE", "COMPLETE", "FAIL"]
    done = meta_train(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 of 4 trials finished (3 in all)" in done.stdout
    assert trial_states(results) == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    study = optuna.load_study(study_name="reptile_optuna", storage=f"sqlite:///{results}/optuna.db")
    assert study.trials[2].value is None
    values = [json.loads(p.read_text())["value"] for p in results.glob("*/search/objective.json")]
    assert len(values) == 4  # the interrupted trial has no objective; the resumed ones are new
    best = yaml.safe_load((results / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(max(values)) == study.best_value


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        ("sqlite:///not_a_database", "cannot open sqlite:///"),
        ("postgresql://user:secret@localhost:1/db", "cannot open postgresql://user:***@"),
        ("nonsense", "cannot read 'nonsense' as an SQLAlchemy URL"),
        ("sqlite:///search/optuna.db", "the study stored in sqlite:///"),
    ],
)
def test_a_storage_that_cannot_serve_the_search_stops_it_before_training(
    tmp_path: Path, storage: str, message: str
) -> None:
    (tmp_path / "not_a_database").write_text("a file, but not a database\n")
    (tmp_path / "search").mkdir()
    other = optuna.create_study(
        study_name="reptile_optuna", storage=f"sqlite:///{tmp_path}/search/optuna.db"
    )  # minimize: the search maximizes
    given = ["results_dir=search", f"hydra.sweeper.storage={storage}"]
    done = run_main("meta-train", *SEARCH, *SMALL_EVAL, *given, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "meta-train" in line]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in done.stderr
    assert "secret" not in done.stderr
    assert sorted(p.name for p in (tmp_path / "search").iterdir()) == ["optuna.db"]
    assert len(other.trials) == 0 and other.direction.name == "MINIMIZE"
