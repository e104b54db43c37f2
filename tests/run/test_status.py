"""Training status: ML-Agents 0.3.0 layout, round trip, atomic saves, one-line errors."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import mlagents_envs
import pytest
import torch

from meta.run.status import CheckpointEntry, StatusError, TrainingStatus


def _entry(step: int) -> CheckpointEntry:
    return CheckpointEntry(step * 100, f"Brain/Brain-{step}.pt", 0.5 * step, 1.7e9 + step)


def test_round_trip_keeps_mlagents_layout(tmp_path: Path) -> None:
    path = tmp_path / "run_logs" / "training_status.json"
    status = TrainingStatus.new(path)
    status.add_checkpoint("Brain", _entry(1))
    status.add_checkpoint("Brain", _entry(2))
    status.set_final_checkpoint("Brain", _entry(2))
    status.set("Brain", "meta_step", 2)
    status.set_lesson_num("arena_size", 3)
    status.save()

    raw = json.loads(path.read_text())
    assert raw["metadata"] == {
        "stats_format_version": "0.3.0",
        "mlagents_version": mlagents_envs.__version__,
        "torch_version": torch.__version__,
    }
    assert raw["Brain"]["checkpoints"][0] == {
        "steps": 100,
        "file_path": "Brain/Brain-1.pt",
        "reward": 0.5,
        "creation_time": 1.7e9 + 1,
        "auxillary_file_paths": [],
    }
    assert raw["Brain"]["final_checkpoint"]["file_path"] == "Brain/Brain-2.pt"
    assert raw["Brain"]["meta_step"] == 2
    assert raw["arena_size"] == {"lesson_num": 3}

    loaded = TrainingStatus.load(path)
    assert loaded.checkpoints("Brain") == [_entry(1), _entry(2)]
    assert loaded.final_checkpoint("Brain") == _entry(2)
    assert loaded.get("Brain", "meta_step") == 2
    assert loaded.lesson_num("arena_size") == 3
    assert loaded.lesson_num("unknown") == 0
    assert loaded.get("nothing", "here", "dflt") == "dflt"


def test_instances_do_not_share_state(tmp_path: Path) -> None:
    a, b = TrainingStatus.new(tmp_path / "a.json"), TrainingStatus.new(tmp_path / "b.json")
    a.set("Brain", "meta_step", 7)
    assert b.get("Brain", "meta_step") is None


def test_checkpoint_add_replaces_same_path_and_remove(tmp_path: Path) -> None:
    status = TrainingStatus.new(tmp_path / "s.json")
    status.add_checkpoint("Brain", _entry(1))
    status.add_checkpoint("Brain", _entry(2))
    newer = CheckpointEntry(999, "Brain/Brain-1.pt", None, 2e9)
    status.add_checkpoint("Brain", newer)
    assert [e.file_path for e in status.checkpoints("Brain")] == [
        "Brain/Brain-2.pt",
        "Brain/Brain-1.pt",
    ]
    assert status.remove_checkpoint("Brain", "Brain/Brain-2.pt")
    assert not status.remove_checkpoint("Brain", "Brain/Brain-2.pt")
    assert status.checkpoints("Brain") == [newer]


def test_failed_save_leaves_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    status = TrainingStatus.new(path)
    status.set("Brain", "meta_step", 1)
    status.save()
    before = path.read_text()
    status.set("Brain", "bad", object())
    with pytest.raises(TypeError):
        status.save()
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_metadata_is_not_settable(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        TrainingStatus.new(tmp_path / "s.json").set("metadata", "torch_version", "x")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "invalid JSON"),
        ('{"Brain": {"checkpoints": []}}', "no 'metadata'"),
        ('{"metadata": {"stats_format_version": "0.2.0"}}', "incompatible"),
        ('{"metadata": {}}', "incompatible"),
        ("[1, 2]", "JSON object"),
        (
            '{"metadata": {"stats_format_version": "0.3.0"}, "Brain": {"checkpoints": [{}]}}',
            "malformed Brain.checkpoints",
        ),
    ],
)
def test_load_errors_are_one_line_and_name_the_file(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "training_status.json"
    path.write_text(content)
    with pytest.raises(StatusError, match=problem) as info:
        TrainingStatus.load(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    assert isinstance(info.value, ValueError)


def test_missing_file_is_a_status_error(tmp_path: Path) -> None:
    with pytest.raises(StatusError, match="not found"):
        TrainingStatus.load(tmp_path / "absent.json")


def test_other_library_versions_only_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "metadata": {
                    "stats_format_version": "0.3.0",
                    "mlagents_version": "0.27.0",
                    "torch_version": "1.8.0",
                },
                "Brain": {"meta_step": 4},
            }
        )
    )
    with caplog.at_level(logging.WARNING):
        status = TrainingStatus.load(path)
    assert status.get("Brain", "meta_step") == 4
    assert "torch_version" in caplog.text and "mlagents_version" in caplog.text
