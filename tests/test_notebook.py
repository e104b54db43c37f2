"""notebooks/meta_steps.ipynb runs top to bottom on a tiny run, and is committed clean."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from meta.config import Config
from meta.evaluation.evaluate import evaluate, plan
from meta.trainer import train

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "meta_steps.ipynb"
TINY_EVAL = [
    "eval.budgets=[0,1]",
    "eval.seeds=2",
    "eval.tasks_per_family=1",
    "eval.splits=[test]",
    "eval.buffer_size=128",
    "eval.eval_episodes=4",
    "eval.bootstrap_samples=100",
]


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


def test_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])


@pytest.mark.integration  # nbclient starts a kernel process
@pytest.mark.parametrize("folder", ["notebooks", "."])
def test_runs_on_a_tiny_run_with_a_curriculum_and_an_evaluation(
    tiny_config: Callable[..., Config],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    folder: str,
) -> None:
    # tmp_path stands for the repository root (results/ under it); the notebook runs from its
    # own folder and from the root with the same relative run_dir
    train(tiny_config("environment_parameters=arena_curriculum"), "nb")
    evaluate(plan(tiny_config("run_id=nb", *TINY_EVAL), "nb"))
    cwd = tmp_path / folder
    cwd.mkdir(exist_ok=True)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    parameters = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert 'run_dir = "results/' in parameters.source  # the default is relative to the root
    parameters.source = 'run_dir = "results/nb"\neval_dir = None'
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name=kernel(tmp_path, monkeypatch),
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert "no curriculum in this run" not in text and "'arena_size'" in text
    assert "measurements" in text and "80% success" in text
    assert images >= 6


@pytest.mark.integration  # nbclient starts a kernel process
def test_shows_per_seed_and_pooled_curves_of_several_runs(
    tiny_config: Callable[..., Config], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for seed in (0, 1):
        train(tiny_config("meta.steps=1", f"seed={seed}"), f"s{seed}")
    runs = ["eval.run_ids=[s0,s1]", "eval.out_dir=${results_dir}/both"]
    evaluate(plan(tiny_config("run_id=s0", *TINY_EVAL, *runs), "s0"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    parameters = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source = 'run_dir = "results/s0"\neval_dir = "results/both"'
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name=kernel(tmp_path, monkeypatch),
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    curves = next(
        c for c in nb.cells if c.cell_type == "code" and "summary_per_seed.csv" in c.source
    )
    text = "".join(o.get("text", "") for o in curves.outputs)
    assert "steps_to_80" in text and any("image/png" in o.get("data", {}) for o in curves.outputs)
