"""The notebooks run top to bottom under papermill, from the root and from notebooks/, and are
committed clean."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from once import MadeOnce
from tinyconfig import TINY, TINY_EVAL, compose_config

from meta.config import Config
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.report.cli import main as meta_report
from meta.trainer import train

if TYPE_CHECKING:  # imported where read: nbformat takes seconds, and every worker collects
    import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
META_STEPS, SWEEP = NOTEBOOKS / "meta_steps.ipynb", NOTEBOOKS / "sweep.ipynb"


def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The `python3` kernel; installed into a temporary prefix when the venv has none."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        from ipykernel.kernelspec import install

        prefix = tmp_path / "jupyter"
        install(prefix=str(prefix))
        monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    return "python3"


def run(
    notebook: Path,
    parameters: dict[str, Any],
    cwd: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> nbformat.NotebookNode:
    """Execute `notebook` with papermill in `cwd`, parameters injected; the executed notebook."""
    import nbformat
    import papermill

    cwd.mkdir(exist_ok=True)
    out = tmp_path / f"executed-{notebook.name}"
    papermill.execute_notebook(
        str(notebook),
        str(out),
        parameters=parameters,
        kernel_name=kernel(tmp_path, monkeypatch),
        cwd=str(cwd),
        progress_bar=False,
    )
    return nbformat.read(out, as_version=4)


def text_of(nb: nbformat.NotebookNode) -> str:
    """Everything the code cells printed."""
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def images_of(nb: nbformat.NotebookNode) -> int:
    """How many figures the cells drew."""
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.parametrize("notebook", [META_STEPS, SWEEP])
def test_committed_without_outputs(notebook: Path) -> None:
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])
    assert '"results' in code[0].source  # the defaults are relative to the repository root


def _results(root: Path, *overrides: str) -> Config:
    """A tiny config writing under `root`/results."""
    return compose_config([*TINY, f"results_dir={root / 'results'}", *overrides])


def _evaluate(root: Path) -> None:
    train(_results(root, "environment_parameters=arena_curriculum"), "nb")
    evaluate(plan_eval(_results(root, "run_id=nb", *TINY_EVAL), "nb"))


@pytest.fixture(scope="module")
def evaluated(made_once: MadeOnce) -> Path:
    """A root whose results/nb is a tiny run with a curriculum, evaluated (made once)."""
    return made_once("notebook-evaluated", _evaluate)


def _sweep(root: Path) -> None:
    for lr in (0.1, 0.5):
        for seed in (0, 1):
            overrides = ("meta.steps=2", f"meta.outer_lr={lr}", f"seed={seed}")
            train(_results(root, *overrides), f"{lr}-{seed}")
    meta_report([str(root / "results"), "--no-figure"])


@pytest.fixture(scope="module")
def swept(made_once: MadeOnce) -> Path:
    """A root whose results/ holds a sweep of 2 settings x 2 seeds and its report (made once)."""
    return made_once("notebook-swept", _sweep)


@pytest.mark.integration  # papermill starts a kernel process
@pytest.mark.parametrize("folder", ["notebooks", "."])
def test_runs_on_a_tiny_run_with_a_curriculum_and_an_evaluation(
    evaluated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    # tmp_path stands for the repository root (results/ under it); the notebook runs from its
    # own folder and from the root with the same relative run_dir
    shutil.copytree(evaluated / "results", tmp_path / "results")
    nb = run(META_STEPS, {"run_dir": "results/nb"}, tmp_path / folder, tmp_path, monkeypatch)
    text = text_of(nb)
    assert "no curriculum in this run" not in text and "'arena_size'" in text
    assert "measurements" in text and "adam lr=" in text  # the selected procedures
    assert images_of(nb) >= 6


@pytest.mark.integration  # papermill starts a kernel process
def test_finds_the_evaluation_of_several_runs_from_run_dir_alone(
    tiny_config: Callable[..., Config], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for seed in (0, 1):
        train(tiny_config("meta.steps=1", f"seed={seed}"), f"s{seed}")
    evaluate(plan_eval(tiny_config("run_id=s0", *TINY_EVAL, "eval.run_ids=[s0,s1]"), "s0"))
    assert (tmp_path / "results" / "eval_s0+s1" / "summary_per_seed.csv").is_file()
    nb = run(META_STEPS, {"run_dir": "results/s1"}, tmp_path, tmp_path, monkeypatch)
    curves = next(
        c for c in nb.cells if c.cell_type == "code" and "summary_per_seed.csv" in c.source
    )
    text = "".join(o.get("text", "") for o in curves.outputs)
    assert "steps_to_80" in text and any("image/png" in o.get("data", {}) for o in curves.outputs)


@pytest.mark.integration  # papermill starts a kernel process
def test_says_where_it_looked_and_what_writes_an_evaluation(
    tiny_config: Callable[..., Config], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train(tiny_config("meta.steps=1"), "alone")
    nb = run(META_STEPS, {"run_dir": "results/alone"}, tmp_path, tmp_path, monkeypatch)
    text = text_of(nb)
    assert "no meta-eval results in " in text and "meta-eval run_id=alone results_dir=" in text


@pytest.mark.integration  # papermill starts a kernel process
@pytest.mark.parametrize("folder", ["notebooks", "."])
def test_the_sweep_notebook_reads_what_meta_report_wrote(
    swept: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    shutil.copytree(swept / "results", tmp_path / "results")
    parameters = {"column": "mean_reward"}  # no sweep_dir: the newest report under results/
    nb = run(SWEEP, parameters, tmp_path / folder, tmp_path, monkeypatch)
    text = text_of(nb)
    assert "2 settings, 4 runs; they differ in ['meta.outer_lr']" in text
    assert "meta.outer_lr=0.1" in text and "not an Optuna search" in text
    assert images_of(nb) == 2


@pytest.mark.integration  # papermill starts a kernel process
@pytest.mark.parametrize(
    ("notebook", "line"),
    [
        (META_STEPS, "no run in {}: set run_dir (papermill: -p run_dir <run dir>)"),
        (SWEEP, "no report.csv in {}: write one with meta-report <sweep_dir>"),
    ],
)
def test_with_nothing_to_read_says_in_one_line_what_to_set(
    notebook: Path, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import papermill

    (tmp_path / "results" / "tour").mkdir(parents=True)  # a run that has written nothing yet
    with pytest.raises(papermill.PapermillExecutionError) as raised:
        run(notebook, {}, tmp_path, tmp_path, monkeypatch)
    assert raised.value.ename == "SystemExit"
    assert raised.value.evalue == line.format(tmp_path.resolve() / "results")
