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
def test_runs_on_a_tiny_run_with_a_curriculum_and_an_evaluation(
    tiny_config: Callable[..., Config], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = train(tiny_config("environment_parameters=arena_curriculum"), "nb")
    evaluate(plan(tiny_config("run_id=nb", *TINY_EVAL), "nb"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    parameters = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source = f"run_dir = {str(run_dir)!r}"
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name=kernel(tmp_path, monkeypatch),
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert "no curriculum in this run" not in text and "'arena_size'" in text
    assert "measurements" in text
    assert images >= 6
