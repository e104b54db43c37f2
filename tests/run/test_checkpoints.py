"""Checkpoint manager: layout, keep-N pruning of files and entries, weights_only loads."""

from __future__ import annotations

import importlib.util
import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from meta.run.checkpoints import CheckpointError, CheckpointManager, load_checkpoint
from meta.run.status import TrainingStatus


def _manager(run_dir: Path, keep: int = 3) -> CheckpointManager:
    status = TrainingStatus.new(run_dir / "run_logs" / "training_status.json")
    return CheckpointManager(run_dir, status, keep_checkpoints=keep)


def _state(step: int) -> dict:
    return {"meta_step": step, "theta": {"w": torch.full((2, 2), float(step))}}


def test_pruning_keeps_exactly_keep_checkpoints(tmp_path: Path) -> None:
    manager = _manager(tmp_path, keep=3)
    for step in range(1, 9):
        manager.save(step, _state(step), reward=step / 10, steps=step * 1000)

    kept = sorted(p.name for p in (tmp_path / "Brain").glob("Brain-*.pt"))
    assert kept == ["Brain-6.pt", "Brain-7.pt", "Brain-8.pt"]
    assert (tmp_path / "Brain" / "checkpoint.pt").is_file()

    on_disk = TrainingStatus.load(tmp_path / "run_logs" / "training_status.json")
    entries = on_disk.checkpoints("Brain")
    assert [e.file_path for e in entries] == [f"Brain/Brain-{s}.pt" for s in (6, 7, 8)]
    assert [e.steps for e in entries] == [6000, 7000, 8000]
    assert entries[-1].reward == pytest.approx(0.8)
    assert on_disk.get("Brain", "meta_step") == 8
    assert all((tmp_path / e.file_path).is_file() for e in entries)


def test_resumed_manager_keeps_pruning_from_loaded_status(tmp_path: Path) -> None:
    manager = _manager(tmp_path, keep=2)
    for step in (1, 2):
        manager.save(step, _state(step), reward=None, steps=step)
    status = TrainingStatus.load(manager.status.path)
    resumed = CheckpointManager(tmp_path, status, keep_checkpoints=2)
    assert load_checkpoint(resumed.latest_path)["meta_step"] == 2
    resumed.save(3, _state(3), reward=None, steps=3)
    assert sorted(p.name for p in (tmp_path / "Brain").glob("Brain-*.pt")) == [
        "Brain-2.pt",
        "Brain-3.pt",
    ]
    assert [e.reward for e in status.checkpoints("Brain")] == [None, None]


def test_unkept_saves_only_update_latest_and_orphans_are_removed(tmp_path: Path) -> None:
    manager = _manager(tmp_path, keep=2)
    manager.save(1, _state(1), reward=None, steps=1)
    (tmp_path / "Brain" / "Brain-7.pt").write_bytes(b"left by a crash")
    (tmp_path / "Brain" / "Brain-notes.pt").write_bytes(b"not ours")
    assert manager.save(2, _state(2), reward=None, steps=2, kept=False) is None
    assert sorted(p.name for p in (tmp_path / "Brain").iterdir()) == [
        "Brain-1.pt",
        "Brain-notes.pt",
        "checkpoint.pt",
    ]
    assert load_checkpoint(manager.latest_path)["meta_step"] == 2
    assert [e.file_path for e in manager.status.checkpoints("Brain")] == ["Brain/Brain-1.pt"]
    assert manager.status.get("Brain", "meta_step") == 2


def test_weights_only_load_round_trips_resumable_state(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    rng = np.random.default_rng(3)
    state = {
        "theta": {"w": torch.randn(3)},
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": rng.bit_generator.state,
        "python_rng": random.getstate(),
        "schedule": [0.1, 2, "x", None, True],
    }
    entry = manager.save(5, state, reward=1.5, steps=10)
    latest = load_checkpoint(manager.latest_path)
    assert torch.equal(latest["theta"]["w"], state["theta"]["w"])
    restored = np.random.default_rng()
    restored.bit_generator.state = latest["numpy_rng"]
    assert restored.random() == rng.random()
    assert tuple(latest["python_rng"]) == state["python_rng"]
    assert manager.load(entry.file_path)["schedule"] == state["schedule"]


def test_missing_corrupt_and_disallowed_checkpoints_fail_in_one_line(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(manager.latest_path)
    manager.save(1, _state(1), reward=0.0, steps=1)
    data = manager.latest_path.read_bytes()
    manager.latest_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt") as info:
        load_checkpoint(manager.latest_path)
    assert "\n" not in str(info.value) and str(manager.latest_path) in str(info.value)

    torch.save({"array": np.zeros(2)}, tmp_path / "numpy.pt")
    with pytest.raises(CheckpointError, match="weights_only") as info:
        load_checkpoint(tmp_path / "numpy.pt")
    assert "\n" not in str(info.value)


def test_save_final_writes_brain_pt_and_final_checkpoint(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    entry = manager.save_final({"w": torch.ones(2)}, steps=123, reward=0.9)
    assert entry.file_path == "Brain.pt"
    assert torch.equal(load_checkpoint(tmp_path / "Brain.pt")["w"], torch.ones(2))
    final = TrainingStatus.load(manager.status.path).final_checkpoint("Brain")
    assert final is not None and (final.steps, final.reward) == (123, 0.9)


def test_export_onnx_skips_with_warning_or_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = _manager(tmp_path)
    manager.save_final({"w": torch.ones(2)}, steps=1, reward=None)
    module = torch.nn.Linear(4, 2)
    with caplog.at_level(logging.WARNING):
        out = manager.export_onnx(module, torch.zeros(1, 4))
    if importlib.util.find_spec("onnx") is None:
        assert out is None and "onnx" in caplog.text
        assert not (tmp_path / "Brain.onnx").exists()
    else:
        assert out == tmp_path / "Brain.onnx" and out.is_file()
