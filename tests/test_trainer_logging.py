"""What a meta-train run writes for people watching it: TensorBoard, wandb, CSV, timers."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from meta.config import Config
from meta.trainer import MetaTrainer, plan_training, train

Factory = Callable[..., Config]
ML_AGENTS_TAGS = (
    "Environment/Cumulative Reward",
    "Environment/Episode Length",
    "Losses/Policy Loss",
    "Losses/Value Loss",
    "Policy/Learning Rate",
    "Policy/Beta",
    "Policy/Epsilon",
    "Policy/Entropy",
)


def scalars(log_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return events


def test_tensorboard_has_one_point_per_meta_step_under_ml_agents_names(
    tiny_config: Factory,
) -> None:
    run_dir = train(tiny_config("logger.per_update_csv=true"), "tb")
    events = scalars(run_dir / "tensorboard")
    tags = set(events.Tags()["scalars"])
    assert set(ML_AGENTS_TAGS) <= tags
    assert {"Meta/Outer Learning Rate", "Meta/Weight Delta Norm", "Meta/Success Rate"} <= tags
    assert {"Policy/Approx KL", "Policy/Clip Fraction", "Policy/Explained Variance"} <= tags
    assert any(t.startswith("Meta/") and t.endswith("/Count") for t in tags)
    for tag in ("Policy/Learning Rate", "Meta/Outer Learning Rate"):
        points = events.Scalars(tag)
        assert [p.step for p in points] == [0, 1, 2, 3]
    lrs = [p.value for p in events.Scalars("Policy/Learning Rate")]
    assert lrs == sorted(lrs, reverse=True) and lrs[0] == pytest.approx(3e-4)
    env_axis = scalars(run_dir / "tensorboard" / "env_steps")
    steps = [p.step for p in env_axis.Scalars("EnvSteps/Policy/Learning Rate")]
    assert steps == [1024, 2048, 3072, 4096]
    with (run_dir / "inner_updates.csv").open() as f:
        updates = list(csv.DictReader(f))
    assert len(updates) == 4 * 2 and {"meta_step", "update", "Losses/Policy Loss"} <= set(
        updates[0]
    )
    # each update's point of its training's learning curve: steps so far, its buffer's episodes
    assert [float(u["steps"]) for u in updates] == [512.0, 1024.0] * 4
    assert {"Environment/Cumulative Reward", "Environment/Success"} <= set(updates[0])
    # against the policy that collected, once the normaliser's statistics or the weights moved
    assert all(float(u["Policy/Approx KL"]) > 0 for u in updates)


def test_the_ratio_is_taken_against_the_policy_that_collected(tiny_config: Factory) -> None:
    # one minibatch of the whole buffer, one epoch, no normaliser: before any step, the ratio
    # of each stored action is exactly 1
    cfg = tiny_config(
        "logger.per_update_csv=true",
        "ppo.batch_size=512",
        "meta.steps=1",
        "network.normalize=false",
    )
    with (train(cfg, "one") / "inner_updates.csv").open() as f:
        updates = list(csv.DictReader(f))
    assert len(updates) == 2
    assert all(abs(float(u["Policy/Approx KL"])) < 1e-9 for u in updates)
    assert all(float(u["Policy/Clip Fraction"]) == 0.0 for u in updates)


def test_timers_tree_is_ml_agents_format_and_children_fit_their_parent(
    tiny_config: Factory,
) -> None:
    run_dir = train(tiny_config(), "timers")
    root = json.loads((run_dir / "run_logs" / "timers.json").read_text())
    assert root["metadata"]["timer_format_version"] == "0.1.0"

    def walk(node: dict[str, Any]) -> None:
        children = node.get("children", {})
        assert sum(c["total"] for c in children.values()) <= node["total"] + 1e-6
        for child in children.values():
            assert {"total", "count", "self"} <= set(child)
            walk(child)

    walk(root)
    meta_step = root["children"]["meta_step"]
    assert meta_step["count"] == 4
    assert {"inner_training", "commit"} <= set(meta_step["children"])
    inner = meta_step["children"]["inner_training"]
    assert inner["count"] == 4
    assert {"policy_forward", "env_step", "update"} <= set(inner["children"])
    assert root["metadata"]["pytorch_version"] and root["metadata"]["end_time_seconds"]


@pytest.mark.heavy
def test_wandb_runs_offline_and_a_resumed_run_keeps_its_id(
    tiny_config: Factory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = tiny_config("logger.wandb=true", "meta.steps=2")
    trainer = MetaTrainer(plan_training(cfg, "wb"), "{}", {})
    trainer.meta_step_once(0)
    trainer.close()
    status = trainer.run_dir / "run_logs" / "training_status.json"
    wandb_id = json.loads(status.read_text())["Brain"]["wandb_run_id"]
    offline = list((trainer.run_dir / "wandb").glob(f"offline-run-*-{wandb_id}"))
    assert offline, "wandb did not run offline"
    for directory in offline:  # what the resumed process writes of wandb is its own
        shutil.rmtree(directory)
    train(tiny_config("logger.wandb=true", "meta.steps=2", "resume=true"), "wb")
    assert json.loads(status.read_text())["Brain"]["wandb_run_id"] == wandb_id
    # the resumed process opened wandb again, on the same run
    assert list((trainer.run_dir / "wandb").glob(f"offline-run-*-{wandb_id}/run-{wandb_id}.wandb"))
