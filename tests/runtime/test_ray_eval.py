"""meta-eval's adaptation jobs on Ray give the sequential results, file for file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tinyconfig import TINY_EVAL

from meta.config import Config
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.trainer import train

Factory = Callable[..., Config]


@pytest.mark.usefixtures("ray_cluster")
def test_adaptation_jobs_on_ray_equal_sequential_evaluation(tiny_config: Factory) -> None:
    train(tiny_config("meta.steps=1"), "r")
    given = ("run_id=r", "eval.joint_run_id=r", *TINY_EVAL)  # the run stands in for its baseline
    sequential = tiny_config(*given, "eval.out_dir=${results_dir}/seq")
    on_ray = tiny_config(*given, "eval.out_dir=${results_dir}/ray", "runtime=ray")
    cells = evaluate(plan_eval(sequential, "r"))
    checked = plan_eval(on_ray, "r")
    assert checked.cluster is not None and not checked.cluster.started  # joined the session's
    assert evaluate(checked) == cells
    out = Path(sequential.results_dir)
    for name in ("adaptation.csv", "summary.csv", "steps_to_80.csv"):
        assert (out / "seq" / name).read_text() == (out / "ray" / name).read_text(), name
