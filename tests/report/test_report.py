"""meta-report on real runs: settings with seeds pooled, held-out results, live runs, bad input."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from once import MadeOnce
from rich.console import Console
from tinyconfig import TINY, TINY_EVAL, compose_config

from meta.config import Config
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.evaluation.statistics import iqm
from meta.process.lock import lock_path
from meta.report.cli import main
from meta.report.figure import curve
from meta.report.runs import Run, find_runs, read_run, read_steps
from meta.report.settings import Setting, group
from meta.report.table import Options, console_tables, summarise
from meta.trainer import train

ONE_FAMILY = "meta.tasks=[{name: FindTarget}]"
SHORT = [ONE_FAMILY, "meta.steps=3", "env.num_areas=4"]
"""4 areas: each inner training ends episodes (with 16, a tiny run ends none)."""


def digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the hash of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """meta-report's exit code, standard output and standard error."""
    try:
        main(list(args))
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _train_sweep(root: Path) -> None:
    results = root / "results"
    for lr in (0.1, 0.5):
        for seed in (0, 1):
            overrides = [f"meta.outer_lr={lr}", f"seed={seed}", f"results_dir={results}"]
            train(compose_config([*TINY, *SHORT, *overrides]), f"lr{lr}-s{seed}")


@pytest.fixture(scope="module")
def trained(made_once: MadeOnce) -> Path:
    """Two settings (outer step size) x two seeds of a tiny one-family run, trained once."""
    return made_once("report-sweep", _train_sweep) / "results"


@pytest.fixture
def sweep(trained: Path, tmp_path: Path) -> Path:
    """A copy of the trained sweep for one test (as results/ under tmp_path)."""
    return Path(shutil.copytree(trained, tmp_path / "results"))


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as file:
        return list(csv.DictReader(file))


def test_a_row_per_setting_seeds_pooled_and_the_runs_untouched(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digest(sweep)
    code, out, _ = report(capsys, str(sweep), "--last", "2")
    assert code == 0
    assert "4 runs in 2 settings, differing in meta.outer_lr (seeds pooled)" in out
    assert "meta.outer_lr=0.1" in out and "meta.outer_lr=0.5" in out
    rows = csv_rows(sweep / "report.csv")
    assert [(r["setting"], r["seeds"], r["meta_steps"]) for r in rows] == [
        ("meta.outer_lr=0.1", "2", "3"),
        ("meta.outer_lr=0.5", "2", "3"),
    ]
    for row, lr in zip(rows, (0.1, 0.5), strict=True):
        finals = []
        for seed in (0, 1):
            steps = read_steps(sweep / f"lr{lr}-s{seed}" / "meta_steps.csv")
            finals.append(np.mean(steps["success_rate"][-2:]))
        assert np.isfinite(finals).all()
        assert float(row["success_iqm"]) == pytest.approx(float(iqm(finals)))
        assert float(row["success_low"]) <= float(row["success_iqm"]) <= float(row["success_high"])
        assert row["run_ids"] == f"lr{lr}-s0 lr{lr}-s1"
    assert "| meta.outer_lr=0.1 | 2 | 3 |" in (sweep / "report.md").read_text()
    assert (sweep / "report.png").read_bytes()[:4] == b"\x89PNG"
    after = digest(sweep)
    assert {k: v for k, v in after.items() if not k.startswith("report.")} == before


@pytest.mark.heavy
def test_held_out_results_where_meta_eval_ran(
    sweep: Path, tiny_config: Callable[..., Config], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = "eval.run_ids=[lr0.1-s0,lr0.1-s1]"
    cells = evaluate(plan_eval(tiny_config("run_id=lr0.1-s0", *TINY_EVAL, ids), "lr0.1-s0"))
    assert (sweep / "eval_lr0.1-s0+lr0.1-s1" / "adaptation.csv").is_file()
    code, out, _ = report(capsys, str(sweep), "--budgets", "0,1")
    assert code == 0 and "held-out success @1" in out and "not evaluated" in out
    evaluated, other = csv_rows(sweep / "report.csv")
    for budget in (0, 1):
        (cell,) = [c for c in cells if (c.method, c.split, c.budget) == ("reptile", "test", budget)]
        assert float(evaluated[f"heldout_success@{budget}"]) == pytest.approx(cell.success_iqm)
        assert other[f"heldout_success@{budget}"] == ""


@pytest.mark.heavy  # meta-eval of the sweep
def test_the_console_table_fits_80_columns_without_breaking_a_word(
    sweep: Path, tiny_config: Callable[..., Config]
) -> None:
    ids = "eval.run_ids=[lr0.1-s0,lr0.1-s1]"
    evaluate(plan_eval(tiny_config("run_id=lr0.1-s0", *TINY_EVAL, ids), "lr0.1-s0"))
    runs = [read_run(p) for p in find_runs([str(sweep)], str(sweep))]
    rows = summarise(group(runs)[0], Options(budgets=(0, 1)))
    rendered = {}
    for width in (80, 1000):
        console = Console(file=io.StringIO(), width=width, color_system=None)
        console.print(*console_tables(rows, 10, width))
        rendered[width] = console.file.getvalue()  # type: ignore[attr-defined]
    narrow, wide = rendered[80], rendered[1000]
    assert max(len(line.rstrip()) for line in narrow.splitlines()) <= 80
    # a word folded across lines (`meta.oute` / `r_lr=0.1`) would leave two others instead
    assert words(narrow) == words(wide)
    assert len(wide.splitlines()) == 3 + len(rows)  # one table: title, header, rule, rows
    assert narrow.split().count("setting") > 1  # the columns that did not fit: a table more
    assert "meta.outer_lr=0.1" in narrow.split() and "held-out" in narrow.split()


def words(text: str) -> set[str]:
    """The words of a rendering, rules left out."""
    return {w for w in text.split() if set(w) != {"─"}}


def test_a_live_run_is_listed_as_running_up_to_its_last_commit(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = sweep / "lr0.5-s1"
    status_file = run / "run_logs" / "training_status.json"
    status = json.loads(status_file.read_text())
    status["Brain"]["meta_step"] = 2  # meta-step 2 not committed yet: its row must not count
    status_file.write_text(json.dumps(status))
    with (run / "meta_steps.csv").open("a") as table:
        table.write("3,FindTarget,{")  # a row being written
    record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    lock_path(sweep, run.name).write_text(json.dumps(record))
    code, out, _ = report(capsys, str(sweep))
    assert code == 0 and "2 (1 running)" in out and "1 runs still hold their lock" in out
    rows = {r["setting"]: r for r in csv_rows(sweep / "report.csv")}
    assert rows["meta.outer_lr=0.5"]["running"] == "1"
    assert rows["meta.outer_lr=0.5"]["meta_steps"] == str(int(np.mean([3, 2])))
    lock_path(sweep, run.name).write_text(json.dumps({**record, "pid": 2**22 + 1}))  # gone
    code, out, _ = report(capsys, str(sweep))  # the holder is gone: the run is read whole
    rows = {r["setting"]: r for r in csv_rows(sweep / "report.csv")}
    assert code == 0 and "running" not in out
    assert (rows["meta.outer_lr=0.5"]["running"], rows["meta.outer_lr=0.5"]["meta_steps"]) == (
        "0",
        "3",
    )


def test_bad_input_is_one_line_and_nothing_is_written(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = report(capsys, str(empty))
    assert code == 2 and err.count("\n") == 1 and "no runs in it" in err and not out
    assert not list(empty.iterdir())
    code, _, err = report(capsys, "nowhere", "--results-dir", str(sweep))
    assert code == 2 and "nowhere: no such directory" in err
    table = sweep / "lr0.1-s1" / "meta_steps.csv"
    table.write_text(table.read_text() + "2,FindTarget,too,few\n")
    before = digest(sweep)
    code, out, err = report(capsys, str(sweep))
    assert code == 2 and err.count("\n") == 1
    assert f"{table}: damaged: line 5 has 4 fields" in err
    assert digest(sweep) == before and not (sweep / "report.csv").exists()


def test_other_algorithms_and_task_distributions_are_separate_settings(
    tiny_config: Callable[..., Config], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train(tiny_config(ONE_FAMILY, "meta.steps=2"), "reptile-find")
    train(tiny_config(ONE_FAMILY, "meta.steps=2", "seed=1"), "reptile-find-1")
    train(tiny_config(ONE_FAMILY, "meta.steps=2", "meta=joint"), "joint-find")
    train(tiny_config("meta.tasks=[{name: CarryObject}]", "meta.steps=2"), "reptile-carry")
    results = tmp_path / "results"
    code, out, _ = report(capsys, str(results), "--no-figure")
    assert code == 0
    assert "runs of different meta.algorithm, meta.tasks are separate settings, not pooled" in out
    rows = csv_rows(results / "report.csv")
    assert sorted(r["seeds"] for r in rows) == ["1", "1", "2"]
    assert all(r["run_ids"].count(" ") == int(r["seeds"]) - 1 for r in rows)
    assert not (results / "report.png").exists()


def test_run_ids_and_a_run_directory_report_beside_the_runs(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = report(capsys, "lr0.1-s0", "lr0.5-s0", "--results-dir", str(sweep))
    assert code == 0 and "2 runs in 2 settings" in out and f"in {sweep}" in out
    run = sweep / "lr0.1-s1"
    code, out, _ = report(capsys, str(run), "--no-figure")
    assert code == 0 and "1 runs in 1 settings" in out
    assert not (run / "report.csv").exists() and (sweep / "report.csv").exists()


def test_the_curve_pools_at_each_meta_step_the_seeds_with_a_value_there(tmp_path: Path) -> None:
    nan = np.nan
    success = {0: [0.2, nan, 0.6, nan, 0.9], 1: [0.4, 0.5, nan, nan, 1.0], 2: [0.0, 0.1, nan]}
    runs = [
        Run(f"s{seed}", tmp_path, {"seed": seed}, {"success_rate": np.array(values)})
        for seed, values in success.items()
    ]
    for run in runs:
        run.steps["meta_step"] = np.arange(len(run.steps["success_rate"]))
    x, center, low, high = curve(Setting("all runs", {}, runs), "success_rate", 1, 200)
    assert list(x) == [0, 1, 2]  # the meta-steps every seed has reached
    assert center[0] == pytest.approx(iqm([0.2, 0.4, 0.0]))
    assert center[1] == pytest.approx(iqm([0.5, 0.1])) and low[1] <= center[1] <= high[1]
    assert center[2] == low[2] == high[2] == pytest.approx(0.6)  # one seed had a value there
