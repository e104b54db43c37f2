"""`ppo=mlagents` as users run it: it composes, trains, exports and resumes bitwise."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from commandline import run_main

from meta.algorithm.ppo.network import make_policy
from meta.config.ppo import NetworkConfig
from meta.interop.mlagents import LOG_SIGMA, POLICY, to_mlagents
from meta.process.faults import FAULT_ENV

PRESET = ["experiment=tiny", "logger=quiet", "meta=single", "ppo=mlagents", "meta.steps=3"]


def _theta(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "Brain.pt", weights_only=True)


def _meta_train(cwd: Path, *args: str, fault: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({"WANDB_MODE": "offline", **({FAULT_ENV: fault} if fault else {})})
    command = [sys.executable, "-m", "meta", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.integration  # a meta-train process killed at a fault point
def test_the_preset_trains_exports_and_resumes_bitwise(tmp_path: Path) -> None:
    whole = run_main("meta-train", *PRESET, "run_id=whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    killed = _meta_train(tmp_path, *PRESET, "run_id=cut", fault="after_writers@1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_main("meta-train", "run_id=cut", "resume=true", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    results = tmp_path / "results"
    theta, again = _theta(results / "whole"), _theta(results / "cut")
    assert theta.keys() == again.keys()
    assert all(torch.equal(theta[k], again[k]) for k in theta)
    assert (results / "whole" / "Brain.onnx").stat().st_size > 0
    configuration = (results / "cut" / "configuration.yaml").read_text()
    assert "ratio: per_dimension" in configuration and "action_scale: 3.0" in configuration
    assert "initialization: mlagents" in configuration


def test_a_fresh_preset_policy_is_mlagents_initial_sigma_in_its_checkpoint() -> None:
    network = NetworkConfig(32, 2, True, initial_log_std=-math.log(3.0))
    policy = make_policy(6, 2, network, 0)
    log_sigma = to_mlagents(policy.state_dict(), True, 0)[POLICY][LOG_SIGMA]
    # ML-Agents starts log sigma at 0: sigma 1 before its actions are divided by 3
    assert torch.allclose(log_sigma, torch.zeros_like(log_sigma), atol=1e-7)
