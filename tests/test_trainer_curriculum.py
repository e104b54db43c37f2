"""Environment parameters and curricula inside meta-train: lessons, status, resume, errors."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from meta.config import Config
from meta.trainer import MetaTrainer, plan_training, train

Factory = Callable[..., Config]
CURRICULUM = (
    "+environment_parameters={arena_size: {curriculum: ["
    "{name: Small, value: 6.0, completion_criteria: {measure: progress, behavior: Brain, "
    "threshold: 0.4}}, {name: Large, value: 12.0}]}}"
)


def table(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "meta_steps.csv").open() as f:
        return list(csv.DictReader(f))


def test_progress_lesson_advances_and_reaches_the_tasks(tiny_config: Factory) -> None:
    run_dir = train(tiny_config(CURRICULUM), "lessons")
    rows = table(run_dir)
    # progress after meta-step k is (k+1)/4: lesson 1 from the step after progress 0.5 > 0.4
    assert [r["lesson/arena_size"] for r in rows] == ["0", "0", "1", "1"]
    sizes = [json.loads(r["task_params"])["arena_size"] for r in rows]
    assert sizes == [6.0, 6.0, 12.0, 12.0]
    status = json.loads((run_dir / "run_logs/training_status.json").read_text())
    assert status["arena_size"] == {"lesson_num": 1}


def test_resume_continues_in_the_stored_lesson(tiny_config: Factory) -> None:
    trainer = MetaTrainer(plan_training(tiny_config(CURRICULUM), "resumed"), "{}", {})
    for k in range(2):
        trainer.meta_step_once(k)
    trainer.close()
    assert trainer.plan.parameters.lesson_nums() == {"arena_size": 1}
    run_dir = train(tiny_config(CURRICULUM, "resume=true"), "resumed")
    assert [r["lesson/arena_size"] for r in table(run_dir)] == ["0", "0", "1", "1"]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "{arena_size: {curriculum: [{name: A, value: 6.0}, {name: B, value: 8.0}]}}",
            "completion_criteria",
        ),
        ("{arena_size: {sampler_type: beta, sampler_parameters: {}}}", "beta"),
        (
            "{arena_size: {curriculum: [{name: A, value: 6.0, completion_criteria: "
            "{measure: progress, behavior: Walker, threshold: 0.5}}, {name: B, value: 8.0}]}}",
            "Walker",
        ),
        (
            "{arena_size: {curriculum: [{name: A, value: 6.0, completion_criteria: "
            "{measure: progress, behavior: Brain, threshold: 1.5}}, {name: B, value: 8.0}]}}",
            "threshold",
        ),
    ],
)
def test_bad_curricula_fail_before_anything_is_written(
    tiny_config: Factory, section: str, message: str
) -> None:
    cfg = tiny_config(f"+environment_parameters={section}")
    with pytest.raises(ValueError, match=message):
        plan_training(cfg, "bad")
    assert not Path(cfg.results_dir).exists()


def test_a_lesson_change_is_announced_with_its_values(
    tiny_config: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="meta"):
        train(tiny_config(CURRICULUM), "announced")
    (line,) = [r.getMessage() for r in caplog.records if "moved to lesson" in r.getMessage()]
    assert "arena_size moved to lesson 1 (Large" in line and "12" in line
    assert "drew arena_size=6" in line
