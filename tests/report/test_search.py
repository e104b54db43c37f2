"""hparams_search: the objective a trial returns, its checks before training, a real search.

A search's study is stored (SQLite under results_dir by default): interrupted, its trial is
failed and the same command continues it.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from commandline import run_main
from tinyconfig import TINY_SEARCH, compose_config

from meta.config.metric import parse_metric
from meta.evaluation.objective import objective_value, pooled_families
from meta.evaluation.statistics import Measurement, iqm

optuna = pytest.importorskip("optuna")


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
    done = run_main("meta-train", *TINY_SEARCH, *overrides, f"results_dir={results}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "meta-train" in line]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in done.stderr
    assert not [p for p in results.rglob("*") if p.is_file()]  # no run was started


@pytest.mark.slow
@pytest.mark.integration  # meta-eval's worker processes, and meta-report's console script
def test_a_real_search_returns_its_objective_and_reads_as_a_sweep(tmp_path: Path) -> None:
    results = tmp_path / "search"
    trials = ["hydra.sweeper.n_trials=2", "meta.steps=2", f"results_dir={results}"]
    # each trial's adaptations in two worker processes: the objective as a study computes it
    done = run_main("meta-train", *TINY_SEARCH, *trials, "eval.workers=2", cwd=tmp_path)
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
@pytest.mark.integration  # a meta-train process and a real signal
def test_an_interrupted_search_fails_its_trial_and_the_same_command_continues_it(
    tmp_path: Path,
) -> None:
    results = tmp_path / "search"
    command = [*TINY_SEARCH, "hydra.sweeper.n_trials=4", "meta.steps=2"]
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
    done = run_main("meta-train", *command, cwd=tmp_path)  # continued in-process
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
    done = run_main("meta-train", *TINY_SEARCH, *given, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "meta-train" in line]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in done.stderr
    assert "secret" not in done.stderr
    assert sorted(p.name for p in (tmp_path / "search").iterdir()) == ["optuna.db"]
    assert len(other.trials) == 0 and other.direction.name == "MINIMIZE"


TYPO = """# @package _global_
defaults:
  - reptile_optuna
  - _self_
hydra:
  sweeper:
    params:
      meta.outr_lr: interval(0.1, 0.5)
"""
"""A search whose space names a key the configuration does not have."""


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            ["hparams_search=typo"],
            "hydra.sweeper.params: Could not override 'meta.outr_lr'. (Key 'outr_lr' not in "
            "'MetaConfig'); did you mean meta.outer_lr?",
        ),
        (
            ["hydra.sweeper.params={meta.outer_lr:'interval(1.0,0.5)'}"],
            "hydra.sweeper.params.meta.outer_lr: meta.outer_lr=interval(1.0,0.5): the interval's "
            "low 1.0 is above its high 0.5",
        ),
        (
            ["hydra.sweeper.params={meta.meta_batch_size:'choice()'}"],
            "hydra.sweeper.params.meta.meta_batch_size: meta.meta_batch_size=choice(): ",
        ),
        (
            ["hydra.sweeper.params={ppo.max_steps:'choice(2048,many)'}"],
            "hydra.sweeper.params: Error merging override ppo.max_steps=many",
        ),
        # with a flag of Hydra's, meta-train leaves its checks before Hydra to the sweeper
        (["--config-dir", "hydra.sweeper.direction=minimize"], "the study stored in"),
        (["--config-dir", "hydra.sweeper.storage=sqlite:///search"], "cannot open sqlite"),
    ],
)
def test_a_search_that_cannot_run_stops_before_any_trial_and_leaves_its_study(
    tmp_path: Path, given: list[str], message: str
) -> None:
    (tmp_path / "conf" / "hparams_search").mkdir(parents=True)
    (tmp_path / "conf" / "hparams_search" / "typo.yaml").write_text(TYPO)
    db = tmp_path / "search" / "optuna.db"
    db.parent.mkdir()
    study = optuna.create_study(
        study_name="reptile_optuna", storage=f"sqlite:///{db}", direction="maximize"
    )
    study.enqueue_trial({"meta.outer_lr": 0.5})
    before = db.read_bytes()
    search = [*TINY_SEARCH, "results_dir=search", *given]
    if "--config-dir" in search or "hparams_search=typo" in search:  # Hydra's flags first
        search = [a for a in search if a != "--config-dir"]
        search = ["--config-dir", str(tmp_path / "conf"), *search]
    done = run_main("meta-train", *search, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "meta-train" in line]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in done.stderr
    assert "trial" not in done.stdout
    assert sorted(p.name for p in db.parent.iterdir()) == ["optuna.db"]
    assert db.read_bytes() == before


OLD_STUDY = Path(__file__).resolve().parents[1] / "data" / "optuna_2_10_study.sql"
"""A study as optuna 2.10 stored it, its schema and two trials (the SQL that made it)."""


def old_study(path: Path) -> Path:
    """An SQLite file holding OLD_STUDY."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.executescript(OLD_STUDY.read_text())
    return path


def test_a_study_of_optuna_2_is_refused_with_the_command_that_upgrades_it(tmp_path: Path) -> None:
    db = old_study(tmp_path / "search" / "optuna.db")
    before = db.read_bytes()
    done = run_main("meta-train", *TINY_SEARCH, "results_dir=search", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "meta-train" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "holds studies of an older Optuna (schema v2.6.0.a" in errors[0]
    assert errors[0].endswith(f"upgrade it with: optuna storage upgrade --storage sqlite:///{db}")
    assert db.read_bytes() == before


@pytest.mark.heavy
@pytest.mark.integration  # optuna's own command line upgrades the study
def test_an_upgraded_study_of_optuna_2_is_continued_with_its_trials(tmp_path: Path) -> None:
    db = old_study(tmp_path / "search" / "optuna.db")
    optuna_cli = Path(sys.executable).parent / "optuna"
    upgrade = [str(optuna_cli), "storage", "upgrade", "--storage", f"sqlite:///{db}"]
    subprocess.run(upgrade, check=True, capture_output=True, timeout=120)
    given = ["results_dir=search", "hydra.sweeper.n_trials=3", "meta.steps=1"]
    done = run_main("meta-train", *TINY_SEARCH, *given, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 of 3 trials finished (2 in all)" in done.stdout
    assert trial_states(tmp_path / "search") == ["COMPLETE"] * 3
