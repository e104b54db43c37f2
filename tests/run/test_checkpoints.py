"""Checkpoint manager: ML-Agents' layout and entries, keep-N pruning, weights_only loads."""

from __future__ import annotations

import logging
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from meta.algorithm.ppo.network import make_policy
from meta.cli import one_line
from meta.config.ppo import NetworkConfig
from meta.interop import onnx as interop_onnx
from meta.interop.mlagents import POLICY, from_mlagents
from meta.run import checkpoints as checkpoints_module
from meta.run.checkpoints import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    refused_globals,
)
from meta.run.status import TrainingStatus

NETWORK = NetworkConfig(hidden_units=8)
ONNX = interop_onnx.available()
SUFFIXES = (".onnx", ".pt") if ONNX else (".pt",)


def _manager(
    run_dir: Path, keep: int = 3, network: NetworkConfig | None = NETWORK
) -> CheckpointManager:
    status = TrainingStatus.new(run_dir / "run_logs" / "training_status.json")
    return CheckpointManager(run_dir, status, keep_checkpoints=keep, network=network)


def _theta(step: int, network: NetworkConfig = NETWORK) -> dict[str, torch.Tensor]:
    return make_policy(10, 2, network, seed=step).state_dict()


def _state(step: int) -> dict:
    return {"meta_step": step, "theta": _theta(step)}


def _files(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "Brain").iterdir())


def _kept(*steps: int) -> list[str]:
    return sorted(f"Brain-{s}{suffix}" for s in steps for suffix in SUFFIXES)


def test_pruning_keeps_exactly_keep_checkpoints_named_by_env_steps(tmp_path: Path) -> None:
    manager = _manager(tmp_path, keep=3)
    for step in range(1, 9):
        manager.save(step, _state(step), reward=step / 10, steps=step * 1000)

    assert _files(tmp_path) == sorted([*_kept(6000, 7000, 8000), "checkpoint.pt"])
    on_disk = TrainingStatus.load(tmp_path / "run_logs" / "training_status.json")
    entries = on_disk.checkpoints("Brain")
    brain = (tmp_path / "Brain").as_posix()
    assert [e.file_path for e in entries] == [f"{brain}/Brain-{s}.onnx" for s in (6000, 7000, 8000)]
    assert [e.auxillary_file_paths for e in entries] == [
        [f"{brain}/Brain-{s}.pt"] for s in (6000, 7000, 8000)
    ]
    assert [e.steps for e in entries] == [6000, 7000, 8000]
    assert entries[-1].reward == pytest.approx(0.8)
    assert on_disk.get("Brain", "meta_step") == 8


def test_entries_are_paths_as_mlagents_resolves_them_and_its_rotation_removes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    manager = _manager(Path("results") / "run", keep=5)
    for step in (1, 2, 3):
        manager.save(step, _state(step), reward=None, steps=step * 100)
    entries = manager.status.to_dict()["Brain"]["checkpoints"]
    assert entries[0]["file_path"] == "results/run/Brain/Brain-100.onnx"
    assert entries[0]["auxillary_file_paths"] == ["results/run/Brain/Brain-100.pt"]
    # ML-Agents' ModelCheckpointManager.remove_checkpoint, keeping 1: os.remove of each path
    for entry in entries[:-1]:
        for path in [entry["file_path"], *entry["auxillary_file_paths"]]:
            if os.path.exists(path):
                os.remove(path)
    assert _files(Path("results") / "run") == sorted([*_kept(300), "checkpoint.pt"])


def test_checkpoints_hold_mlagents_modules_beside_the_resume_state(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    theta = _theta(4)
    manager.save(2, {"meta_step": 2, "theta": theta}, reward=None, steps=4096)
    for path in (manager.latest_path, manager.kept_path(4096)):
        state = load_checkpoint(path)
        assert {"meta_step", "theta", "training_status", "Policy", "Optimizer:critic"} <= set(state)
        assert state["global_step"]["_GlobalSteps__global_step"].tolist() == [4096]
        mapped, network = from_mlagents(state, str(path))
        assert (network.hidden_units, network.normalize) == (8, True)
        # a normaliser that saw nothing (count 0) is ML-Agents' start, one step: count 1
        assert all(
            torch.allclose(mapped[k], theta[k], atol=1e-6) for k in theta if "count" not in k
        )


def test_the_network_comes_from_the_runs_configuration(tmp_path: Path) -> None:
    (tmp_path / "configuration.yaml").write_text(
        "network:\n  hidden_units: 8\n  normalize: false\n"
    )
    manager = _manager(tmp_path, network=None)
    manager.save(1, {"theta": _theta(1, NetworkConfig(8, 2, False))}, reward=None, steps=10)
    policy = load_checkpoint(manager.latest_path)[POLICY]
    assert not any("normalizer" in key for key in policy)


def test_resumed_manager_keeps_pruning_from_loaded_status(tmp_path: Path) -> None:
    manager = _manager(tmp_path, keep=2)
    for step in (1, 2):
        manager.save(step, _state(step), reward=None, steps=step)
    status = TrainingStatus.load(manager.status.path)
    resumed = CheckpointManager(tmp_path, status, keep_checkpoints=2, network=NETWORK)
    assert load_checkpoint(resumed.latest_path)["meta_step"] == 2
    resumed.save(3, _state(3), reward=None, steps=3)
    assert _files(tmp_path) == sorted([*_kept(2, 3), "checkpoint.pt"])
    assert [e.reward for e in status.checkpoints("Brain")] == [None, None]


def test_old_entries_named_by_meta_step_are_still_rotated(tmp_path: Path) -> None:
    manager = _manager(tmp_path, keep=1)
    (tmp_path / "Brain").mkdir()
    (tmp_path / "Brain" / "Brain-3.pt").write_bytes(b"a kept checkpoint of an older version")
    manager.status.set(
        "Brain",
        "checkpoints",
        [{"steps": 30, "file_path": "Brain/Brain-3.pt", "reward": None, "creation_time": 1.0}],
    )
    manager.save(4, _state(4), reward=None, steps=40)
    assert _files(tmp_path) == sorted([*_kept(40), "checkpoint.pt"])


def test_unkept_saves_only_update_latest_and_orphans_are_removed(tmp_path: Path) -> None:
    manager = _manager(tmp_path, keep=2)
    manager.save(1, _state(1), reward=None, steps=1)
    for name in ("Brain-7.pt", "Brain-7.onnx", "Brain-notes.pt"):
        (tmp_path / "Brain" / name).write_bytes(b"left by a crash, or not ours")
    assert manager.save(2, _state(2), reward=None, steps=2, kept=False) is None
    assert _files(tmp_path) == sorted([*_kept(1), "Brain-notes.pt", "checkpoint.pt"])
    assert load_checkpoint(manager.latest_path)["meta_step"] == 2
    assert [e.steps for e in manager.status.checkpoints("Brain")] == [1]
    assert manager.status.get("Brain", "meta_step") == 2


def test_a_failed_kept_write_leaves_neither_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(tmp_path)
    manager.save(1, _state(1), reward=None, steps=10)
    real = checkpoints_module.atomic_write_bytes

    def full_on_pt(path: Path, data: bytes, durable: bool = True) -> None:
        if Path(path).name == "Brain-20.pt":
            raise OSError(28, "No space left on device", str(path))
        real(path, data, durable)

    monkeypatch.setattr(checkpoints_module, "atomic_write_bytes", full_on_pt)
    before = (tmp_path / "Brain" / "checkpoint.pt").read_bytes()
    with pytest.raises(OSError, match="No space"):
        manager.save(2, _state(2), reward=None, steps=20)
    assert _files(tmp_path) == sorted([*_kept(10), "checkpoint.pt"])
    assert (tmp_path / "Brain" / "checkpoint.pt").read_bytes() == before


def test_without_onnx_the_pt_files_are_written_and_it_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(interop_onnx, "available", lambda: False)
    manager = _manager(tmp_path)
    with caplog.at_level(logging.WARNING):
        for step in (1, 2):
            manager.save(step, _state(step), reward=None, steps=step)
        manager.save_final(_theta(2), steps=2, reward=None)
    assert _files(tmp_path) == ["Brain-1.pt", "Brain-2.pt", "checkpoint.pt"]
    assert not (tmp_path / "Brain.onnx").exists() and (tmp_path / "Brain.pt").is_file()
    assert caplog.text.count("ONNX export skipped") == 1 and "pip install onnx" in caplog.text


def test_weights_only_load_round_trips_resumable_state(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    rng = np.random.default_rng(3)
    state = {
        "theta": _theta(3),
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": rng.bit_generator.state,
        "python_rng": random.getstate(),
        "schedule": [0.1, 2, "x", None, True],
    }
    entry = manager.save(5, state, reward=1.5, steps=10)
    latest = load_checkpoint(manager.latest_path)
    assert all(torch.equal(latest["theta"][k], v) for k, v in state["theta"].items())
    restored = np.random.default_rng()
    restored.bit_generator.state = latest["numpy_rng"]
    assert restored.random() == rng.random()
    assert tuple(latest["python_rng"]) == state["python_rng"]
    assert manager.load(entry.auxillary_file_paths[0])["schedule"] == state["schedule"]
    assert manager.local(entry.file_path) == manager.kept_path(10, ".onnx")


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
    with pytest.raises(CheckpointError, match=r"holds code \(numpy\S*_reconstruct") as info:
        load_checkpoint(tmp_path / "numpy.pt")
    assert "\n" not in str(info.value)


class _RunsCode:
    """Unpickling this calls os.system: the checkpoint a malicious file would be."""

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return (os.system, ("touch pwned",))


def test_a_checkpoint_that_would_run_code_is_refused_as_code_without_torchs_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "checkpoint.pt"
    torch.save({"theta": _RunsCode()}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert message == f"{path} holds code ({os.system.__module__}.system), not weights: refused"
    assert "weights_only" not in message and not (tmp_path / "pwned").exists()


def test_code_is_named_in_torch_saves_format_and_refused_in_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    saved = tmp_path / "saved.pt"
    torch.save({"theta": _RunsCode(), "w": torch.zeros(2)}, saved)
    assert refused_globals(saved) == [f"{os.system.__module__}.system"]
    ok = tmp_path / "ok.pt"
    torch.save({"theta": {"w": torch.zeros(2)}, "rng": torch.get_rng_state(), "n": [1, "a"]}, ok)
    assert refused_globals(ok) == []
    # pickles torch's weights-only loader cannot read: refused all the same, nothing runs
    newer = tmp_path / "protocol5.pt"
    torch.save({"theta": _RunsCode()}, newer, pickle_protocol=5)
    raw = tmp_path / "raw.pkl"
    raw.write_bytes(pickle.dumps({"theta": _RunsCode()}, protocol=2))
    for path in (newer, raw):
        assert refused_globals(path) == []
        with pytest.raises(CheckpointError, match="corrupt checkpoint") as info:
            load_checkpoint(path)
        assert "weights_only" not in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "pwned").exists()


def test_save_final_writes_brain_pt_onnx_and_mlagents_final_checkpoint(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    theta = _theta(5)
    manager.save(3, {"theta": theta}, reward=0.9, steps=123)
    entry = manager.save_final(theta, steps=123, reward=0.9)
    assert entry.file_path == (tmp_path / "Brain.onnx").as_posix()
    assert entry.auxillary_file_paths == [(tmp_path / "Brain" / "Brain-123.pt").as_posix()]
    final_weights = load_checkpoint(tmp_path / "Brain.pt")
    assert all(torch.equal(final_weights[k], theta[k]) for k in theta)
    assert (tmp_path / "Brain.onnx").is_file() == ONNX
    final = TrainingStatus.load(manager.status.path).final_checkpoint("Brain")
    assert final is not None and (final.steps, final.reward) == (123, 0.9)


def test_the_printed_line_names_each_cause_once(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"theta": _RunsCode()}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert one_line(info.value) == str(info.value)  # raised `from None`: torch's error is gone
    try:
        try:
            raise OSError("disk gone")
        except OSError as cause:
            raise ValueError("could not save") from cause
    except ValueError as error:
        assert one_line(error) == "could not save (disk gone)"
