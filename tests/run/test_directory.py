"""initialize_from an ML-Agents run directory: θ from its modules, bad input in one line."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from meta.algorithm.ppo.network import make_policy
from meta.config import Config
from meta.config.ppo import NetworkConfig
from meta.interop.mlagents import to_mlagents
from meta.run.checkpoints import CheckpointError
from meta.run.directory import RunError, latest_weights
from meta.trainer import MetaTrainer, plan_training
from tests.algorithm.stacking import observe

Factory = Callable[..., Config]
TINY = NetworkConfig(hidden_units=32)
"""The network of experiment=tiny."""


def mlagents_run(results: Path, run_id: str, network: NetworkConfig = TINY, **kw: int) -> dict:
    """An ML-Agents run directory as `mlagents-learn --run-id` leaves it; returns our θ."""
    sizes = {"obs": 10, "actions": 2, **kw}
    policy = make_policy(sizes["obs"], sizes["actions"], network, seed=11)
    observe(policy, 4.0 * torch.randn(300, sizes["obs"]))
    theta = policy.state_dict()
    brain = results / run_id / "Brain"
    brain.mkdir(parents=True)
    modules = to_mlagents(theta, network.normalize, 50000)
    for name in ("checkpoint.pt", "Brain-50000.pt"):
        torch.save(modules, brain / name)
    (results / run_id / "run_logs").mkdir()
    return theta


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` by content hash."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_latest_weights_maps_an_mlagents_checkpoint(tmp_path: Path) -> None:
    theta = mlagents_run(tmp_path, "ml")
    mapped = latest_weights(str(tmp_path), "ml", TINY, (10, 2))
    assert list(mapped) == list(theta)
    assert all(torch.allclose(mapped[k], theta[k], rtol=1e-6, atol=1e-6) for k in theta)


def test_meta_train_starts_from_an_mlagents_run(tiny_config: Factory) -> None:
    cfg = tiny_config("initialize_from=ml")
    theta = mlagents_run(Path(cfg.results_dir), "ml")
    trainer = MetaTrainer(plan_training(cfg, "child"), "{}", {})
    try:
        assert all(torch.allclose(trainer.theta[k], theta[k], atol=1e-6) for k in theta)
    finally:
        trainer.close()


@pytest.mark.parametrize(
    ("overrides", "sizes", "message"),
    [
        (["network.hidden_units=64"], {}, "hidden_units 32 there, 64 here"),
        (["network.normalize=false"], {}, "normalize true there, false here"),
        ([], {"actions": 3}, "action_size 3 there, 2 here"),
        ([], {"obs": 12}, "obs_size 12 there, 10 here"),
    ],
)
def test_another_network_is_refused_in_one_line_before_anything_is_written(
    tiny_config: Factory, overrides: list[str], sizes: dict[str, int], message: str
) -> None:
    cfg = tiny_config("initialize_from=ml", *overrides)
    results = Path(cfg.results_dir)
    mlagents_run(results, "ml", **sizes)
    before = snapshot(results)
    with pytest.raises(ValueError) as info:
        plan_training(cfg, "child")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(results / "ml" / "Brain" / "checkpoint.pt") in str(info.value)
    assert snapshot(results) == before and not (results / "child").exists()


def test_an_mlagents_run_without_behavior_brain_is_named(tiny_config: Factory) -> None:
    cfg = tiny_config("initialize_from=ml")
    results = Path(cfg.results_dir)
    mlagents_run(results, "ml")
    (results / "ml" / "Brain").rename(results / "ml" / "3DBall")
    before = snapshot(results)
    with pytest.raises(RunError, match="has no behavior 'Brain' \\(it has 3DBall\\)") as info:
        plan_training(cfg, "child")
    assert "\n" not in str(info.value) and snapshot(results) == before


def test_a_corrupt_mlagents_checkpoint_is_one_line(tiny_config: Factory) -> None:
    cfg = tiny_config("initialize_from=ml")
    results = Path(cfg.results_dir)
    mlagents_run(results, "ml")
    checkpoint = results / "ml" / "Brain" / "checkpoint.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:300])
    before = snapshot(results)
    with pytest.raises(CheckpointError, match="corrupt checkpoint") as info:
        plan_training(cfg, "child")
    assert "\n" not in str(info.value) and snapshot(results) == before


def test_a_checkpoint_of_neither_kind_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x" / "Brain").mkdir(parents=True)
    torch.save({"model": torch.zeros(2)}, tmp_path / "x" / "Brain" / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="neither a meta-train nor an ML-Agents checkpoint"):
        latest_weights(str(tmp_path), "x")
