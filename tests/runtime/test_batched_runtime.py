"""meta-train runtime=batched as users run it: θ as runtime=local's to rounding, resumed bitwise."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.policy import policy_for
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.reptile import Task
from meta.algorithm.request import TrainRequest
from meta.config import Config, EnvConfig, RuntimeConfig
from meta.evaluation.evaluate import plan_eval
from meta.run.faults import FAULT_ENV
from meta.runtime.batched import Stacked, units
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import make_executor
from meta.runtime.jobs import Training

Factory = Callable[..., Config]

pytestmark = pytest.mark.integration  # meta-train runs as a process

TOLERANCE = 1e-5
"""max |Δθ| between runtime=local and runtime=batched: the stacks round differently."""
RUN = ["experiment=tiny", "logger=quiet", "meta.meta_batch_size=3", "meta.steps=3"]


def _meta_train(
    cwd: Path, *args: str, fault: str = "", environ: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update(
        {"WANDB_MODE": "offline", **({FAULT_ENV: fault} if fault else {}), **(environ or {})}
    )
    command = [sys.executable, "-m", "meta", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _theta(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "Brain.pt", weights_only=True)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_batched_theta_is_locals_to_rounding_and_a_killed_run_resumes_bitwise(
    tmp_path: Path, compiled: bool
) -> None:
    batched = (*RUN, "runtime=batched", f"runtime.compile={str(compiled).lower()}")
    for run_id, args in (("local", (*RUN, "runtime=local")), ("whole", batched)):
        done = _meta_train(tmp_path, *args, f"run_id={run_id}")
        assert done.returncode == 0, done.stderr
    killed = _meta_train(tmp_path, *batched, "run_id=cut", fault="after_writers@1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _meta_train(tmp_path, "run_id=cut", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    results = tmp_path / "results"
    local, whole, cut = (_theta(results / name) for name in ("local", "whole", "cut"))
    assert all(torch.equal(whole[k], cut[k]) for k in whole)
    delta = max(float((local[k] - whole[k]).abs().max()) for k in local)
    steps = list(csv.DictReader((results / "whole" / "meta_steps.csv").open()))
    assert len(steps) == 3 * 3  # a row per inner training
    moved = min(float(row["theta_delta_norm"]) for row in steps)
    assert 0 < delta < TOLERANCE < moved / 100  # far below what one meta-step moves θ


def test_batched_with_unity_builds_is_refused_in_one_line(tmp_path: Path) -> None:
    refused = _meta_train(tmp_path, *RUN, "runtime=batched", "env=unity", "run_id=x")
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0
    assert "runtime=batched stacks native tasks only" in refused.stderr
    assert not (tmp_path / "results" / "x").exists()


@pytest.mark.parametrize(
    ("args", "environ", "named"),
    [
        (("runtime=local",), {}, "runtime=local stacks none: add runtime=batched"),
        (("runtime=batched",), {"CXX": "no-such-compiler"}, "needs a C++ compiler"),
    ],
    ids=["unstacked", "no-compiler"],
)
def test_compile_where_nothing_stacks_or_without_a_compiler_is_refused_in_one_line(
    tmp_path: Path, args: tuple[str, ...], environ: dict[str, str], named: str
) -> None:
    refused = _meta_train(
        tmp_path, *RUN, *args, "runtime.compile=true", "run_id=x", environ=environ
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and named in refused.stderr
    assert not (tmp_path / "results" / "x").exists()


def test_meta_eval_refuses_compile_where_nothing_stacks(tiny_config: Factory) -> None:
    run = tiny_config()
    run_dir = Path(run.results_dir) / "u"
    run_dir.mkdir(parents=True)
    OmegaConf.save(OmegaConf.structured(run), run_dir / "configuration.yaml")
    named = r"^runtime\.compile=true compiles [^\n]* runtime=local stacks none: add eval\.batched"
    with pytest.raises(ValueError, match=named):
        plan_eval(tiny_config("runtime.compile=true", "run_id=u"), "u")


def test_every_executor_that_stacks_passes_compile_on() -> None:
    on, env = RuntimeConfig(backend="batched", compile=True), EnvConfig()
    assert make_executor(on, env).compiled  # type: ignore[attr-defined]
    assert make_executor(RuntimeConfig(compile=True), env, stack=True).compiled  # type: ignore[attr-defined]
    workers = make_executor(RuntimeConfig(compile=True), env, workers=2, stack=True)
    try:
        assert workers.compiled  # type: ignore[attr-defined]
    finally:
        workers.close()
    requests = _stackable_requests()
    (_, share), *_ = units([Training(r) for r in requests], 1, compiled=True)
    assert isinstance(share, Stacked) and share.compiled


def _stackable_requests() -> list[TrainRequest]:
    """Three trainings that share a stack."""
    pool = EnvPool(EnvConfig(num_areas=8))
    network, ppo = NetworkConfig(hidden_units=32), PPOConfig(max_steps=1024, buffer_size=512)
    theta = cpu_weights(policy_for(pool.env("FindTarget", {}, 0), network, seed=5))
    task = Task("FindTarget", {})
    return [TrainRequest((task,), theta, 40 + i, ppo, network) for i in range(3)]
