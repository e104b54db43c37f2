"""Every runtime trains stacks: a killed run resumes bitwise, compiled or not; the keys that
chose whether to stack are refused in one line, and a run that named them still resumes."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.request import Task, TrainRequest
from meta.cli import CONFIG_DIR
from meta.config import Config, EnvConfig, RuntimeConfig, retired
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.evaluation.runs import run_config
from meta.process.faults import FAULT_ENV
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import make_executor
from meta.runtime.jobs import Stacked, Training, units
from tests.commandline import run_main

Factory = Callable[..., Config]

TOLERANCE = 1e-5
"""max |Δθ| between a run's stacks compiled and eager: the kernels round differently."""
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


@pytest.mark.integration  # meta-train runs as a process, killed
def test_a_killed_stacked_run_resumes_bitwise_and_compiled_stacks_match_eager_to_rounding(
    tmp_path: Path,
) -> None:
    compiled = (*RUN, "runtime.compile=true")
    eager = run_main("meta-train", *RUN, "run_id=eager", cwd=tmp_path)  # no process needed
    assert eager.returncode == 0, eager.stderr
    done = _meta_train(tmp_path, *compiled, "run_id=whole")  # compiled as the killed one is
    assert done.returncode == 0, done.stderr
    killed = _meta_train(tmp_path, *compiled, "run_id=cut", fault="after_writers@1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _meta_train(tmp_path, "run_id=cut", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    results = tmp_path / "results"
    eager, whole, cut = (_theta(results / name) for name in ("eager", "whole", "cut"))
    assert all(torch.equal(whole[k], cut[k]) for k in whole)
    delta = max(float((eager[k] - whole[k]).abs().max()) for k in eager)
    steps = list(csv.DictReader((results / "whole" / "meta_steps.csv").open()))
    assert len(steps) == 3 * 3  # a row per inner training
    moved = min(float(row["theta_delta_norm"]) for row in steps)
    assert 0 < delta < TOLERANCE < moved / 100  # far below what one meta-step moves θ


def test_compile_without_a_compiler_is_refused_in_one_line(tmp_path: Path) -> None:
    os.environ["CXX"] = "no-such-compiler"
    try:
        refused = run_main("meta-train", *RUN, "runtime.compile=true", "run_id=x", cwd=tmp_path)
    finally:
        del os.environ["CXX"]
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "needs a C++ compiler" in refused.stderr
    assert not (tmp_path / "results" / "x").exists()


GONE = [
    ("meta-train", "runtime=batched", "runtime=batched is gone: every runtime trains stacks"),
    ("meta-train", "runtime=ray_batched", "use runtime=ray"),
    ("meta-train", "runtime.backend=batched", "use runtime=local"),
    ("meta-train", "runtime.stack=true", "runtime.stack is gone: runtime=ray's actors always"),
    ("meta-train", "eval.batched=true", "eval.batched is gone: meta-eval always trains"),
    ("meta-eval", "eval.batched=false", "eval.batched is gone"),
    ("meta-eval", "eval.batched_joint=true", "eval.batched_joint is gone: meta-eval pretrains"),
    ("meta-eval", "runtime=ray_batched", "runtime=ray_batched is gone"),
]


@pytest.mark.parametrize(("program", "override", "says"), GONE, ids=[g[1] for g in GONE])
def test_a_key_that_chose_whether_to_stack_is_refused_naming_what_replaced_it(
    tmp_path: Path, program: str, override: str, says: str
) -> None:
    refused = run_main(
        program, *([] if program == "meta-eval" else RUN), "run_id=x", override, cwd=tmp_path
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert refused.stderr.startswith(f"{program}: error: ") and says in refused.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("override", ["runtime=batched", "runtime.stack=true", "eval.batched=true"])
def test_a_composed_configuration_that_names_one_is_refused_the_same(override: str) -> None:
    with (
        initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"),
        pytest.raises(Exception) as composing,
    ):
        OmegaConf.to_object(compose(config_name="config", overrides=[override]))
    assert retired.in_error(composing.value) == retired.in_overrides([override]) is not None
    assert retired.in_error(ValueError("Key 'stak' not in 'RuntimeConfig'")) is None


def test_a_run_whose_configuration_names_them_resumes_and_evaluates(tmp_path: Path) -> None:
    first = run_main("meta-train", *RUN, "meta.steps=1", "run_id=old", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "results" / "old"
    saved = OmegaConf.load(run_dir / "configuration.yaml")
    saved.runtime.backend, saved.runtime.stack = "batched", True
    saved.eval.batched, saved.eval.batched_joint = True, False
    OmegaConf.save(saved, run_dir / "configuration.yaml")
    resumed = run_main("meta-train", "run_id=old", "resume=true", "meta.steps=2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    rows = list(csv.DictReader((run_dir / "meta_steps.csv").open()))
    assert {int(r["meta_step"]) for r in rows} == {0, 1}
    assert run_config(run_dir, str(tmp_path / "results")).runtime.backend == "local"


def test_every_executor_passes_compile_on_and_stacks() -> None:
    on, env = RuntimeConfig(compile=True), EnvConfig()
    assert make_executor(on, env).compiled  # type: ignore[attr-defined]
    workers = make_executor(on, env, workers=2)
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


@pytest.mark.heavy
def test_a_meta_step_shared_out_to_worker_processes_gives_the_in_process_theta_bitwise(
    tiny_config: Callable[..., Config],
) -> None:
    from meta.trainer import train

    def theta(*overrides: str) -> dict[str, torch.Tensor]:
        cfg = tiny_config("meta.steps=2", "meta.meta_batch_size=4", *overrides)
        run_dir = train(cfg, "workers_" + "_".join(o.replace(".", "_") for o in overrides))
        return _theta(run_dir)

    here, shared = theta("runtime.workers=1"), theta("runtime.workers=2")
    assert here.keys() == shared.keys()
    assert all(torch.equal(here[k], shared[k]) for k in here)


def test_workers_on_ray_are_refused_naming_the_actors() -> None:
    with pytest.raises(ValueError, match=r"runtime.workers is for runtime=local.*num_actors"):
        RuntimeConfig(backend="ray", workers=2).validate()
    with pytest.raises(ValueError, match=re.escape("runtime.workers must be > 0")):
        RuntimeConfig(workers=0).validate()
