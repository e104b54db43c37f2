"""meta-train over the builds (env.backend=unity): completes, resumes, survives a killed build."""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from meta.config import Config
from meta.trainer import MetaTrainer, plan_training, train

Factory = Callable[..., Config]
FreePorts = Callable[..., int]
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*")


def unity(tiny_config: Factory, base_port: int, *overrides: str) -> Config:
    """A tiny run over the builds, one per family at base_port and base_port + 1."""
    return tiny_config(
        "env=unity",
        "env.num_areas=8",
        f"env.base_port={base_port}",
        *overrides,
    )


@pytest.mark.integration
def test_unity_backend_completes_and_resumes(tiny_config: Factory, free_ports: FreePorts) -> None:
    port = free_ports(2)
    cfg = unity(tiny_config, port, "meta.steps=3")
    trainer = MetaTrainer(plan_training(cfg, "u"), "{}", {})
    trainer.meta_step_once(0)
    trainer.close()
    assert trainer.plan.pool._builds == {}  # builds closed with the run
    run_dir = train(unity(tiny_config, port, "meta.steps=3", "resume=true"), "u")
    with (run_dir / "meta_steps.csv").open() as f:
        assert [r["meta_step"] for r in csv.DictReader(f)] == ["0", "1", "2"]
    assert (run_dir / "Brain.pt").is_file()
    assert list((run_dir / "run_logs").glob("Player-*.log"))


@pytest.mark.integration
def test_a_killed_build_is_restarted_and_the_meta_step_retried(
    tiny_config: Factory, free_ports: FreePorts, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = unity(
        tiny_config, free_ports(2), "meta.steps=2", "meta.tasks=[{name:FindTarget,weight:1}]"
    )
    trainer = MetaTrainer(plan_training(cfg, "k"), "{}", {})
    try:
        trainer.meta_step_once(0)
        theta = {k: v.clone() for k, v in trainer.theta.items()}
        ((_, build_pid),) = trainer.plan.pool._builds["FindTarget", 0].pids
        os.kill(build_pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING):
            trainer.meta_step_once(1)
        assert trainer.inner.restarts == 1
        assert "retrying its inner training from theta" in caplog.text
        assert trainer.meta_step == 2
        assert any((trainer.theta[k] != theta[k]).any() for k in theta)
    finally:
        trainer.close()


@pytest.mark.integration
def test_repeated_crashes_end_with_a_clear_error(
    tiny_config: Factory, free_ports: FreePorts
) -> None:
    cfg = unity(
        tiny_config,
        free_ports(2),
        "meta.steps=2",
        "env.max_restarts=0",
        "meta.tasks=[{name:FindTarget,weight:1}]",
    )
    trainer = MetaTrainer(plan_training(cfg, "e"), "{}", {})
    try:
        trainer.meta_step_once(0)
        ((_, build_pid),) = trainer.plan.pool._builds["FindTarget", 0].pids
        os.kill(build_pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="max_restarts"):
            trainer.meta_step_once(1)
        assert trainer.meta_step == 1  # nothing of the failed meta-step applied
        status = json.loads((trainer.run_dir / "run_logs/training_status.json").read_text())
        assert status["Brain"]["meta_step"] == 1
    finally:
        trainer.close()


def test_a_missing_build_is_refused_before_anything_is_written(
    tiny_config: Factory, free_ports: FreePorts
) -> None:
    cfg = unity(
        tiny_config,
        free_ports(2),
        "env.path={FindTarget: nowhere/FindTarget, CarryObject: nowhere/CarryObject}",
    )
    with pytest.raises(FileNotFoundError, match="nowhere"):
        plan_training(cfg, "missing")
    assert not Path(cfg.results_dir).exists()
