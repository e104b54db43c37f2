"""Stats writers: read back CSV, TensorBoard events and the offline wandb run file."""

from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandbfiles import wandb_history

from meta.observe.reporter import (
    CUMULATIVE_REWARD,
    ENV_STEPS_PREFIX,
    META_STEP_COLUMNS,
    SUCCESS_RATE,
    ConsoleWriter,
    CSVWriter,
    StatsReporter,
)
from meta.observe.writers import TensorBoardWriter, WandbWriter, build_reporter


def _row(step: int, **extra: Any) -> dict[str, Any]:
    row = {c: "" for c in META_STEP_COLUMNS}
    row.update(
        meta_step=step,
        task="FindTarget",
        task_params={"motor_rotation": 0.5, "a": 1},
        mean_reward=0.1 * step,
        **extra,
    )
    return row


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _scalars(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_csv_appends_on_resume_and_truncates(tmp_path: Path) -> None:
    path = tmp_path / "meta_steps.csv"
    writer = CSVWriter(path, META_STEP_COLUMNS)
    writer.write_rows("meta_steps", [_row(s) for s in range(1, 6)])
    writer.write_rows("inner_updates", [{"anything": 1}])  # another table: ignored
    writer.close()
    with path.open("a") as f:
        f.write("6,FindTarg")  # a row cut short by a crash

    resumed = CSVWriter(path, META_STEP_COLUMNS, truncate_after=3)
    resumed.write_rows("meta_steps", [_row(4, success_rate=1.0)])
    resumed.close()
    rows = _read_csv(path)
    assert [r["meta_step"] for r in rows] == ["1", "2", "3", "4"]
    assert rows[3]["success_rate"] == "1.0"
    assert json.loads(rows[0]["task_params"]) == {"a": 1, "motor_rotation": 0.5}
    assert path.read_text().count("meta_step,") == 1

    again = CSVWriter(path, META_STEP_COLUMNS)  # no truncation: plain append, cut row dropped
    again.truncate_after(2)
    again.close()
    assert [r["meta_step"] for r in _read_csv(path)] == ["1", "2"]


def test_csv_rejects_other_header_and_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "meta_steps.csv"
    CSVWriter(path, META_STEP_COLUMNS).close()
    with pytest.raises(ValueError, match="header"):
        CSVWriter(path, ["extra", *META_STEP_COLUMNS])
    with pytest.raises(ValueError, match=r"written before its columns \['extra'\] existed"):
        CSVWriter(path, [*META_STEP_COLUMNS, "extra"])  # an older version's table
    writer = CSVWriter(path, META_STEP_COLUMNS)
    with pytest.raises(ValueError):
        writer.write_rows("meta_steps", [{"meta_step": 1, "typo": 2}])
    writer.close()


def test_tensorboard_one_point_per_meta_step_on_both_axes(tmp_path: Path) -> None:
    log_dir = tmp_path / "tensorboard"
    writer = TensorBoardWriter(log_dir)
    for step in range(1, 6):
        writer.write(step, step * 1000, {CUMULATIVE_REWARD: step / 10, SUCCESS_RATE: 0.5})
    writer.close()
    assert _scalars(log_dir, CUMULATIVE_REWARD) == [(s, pytest.approx(s / 10)) for s in range(1, 6)]
    assert [s for s, _ in _scalars(log_dir, SUCCESS_RATE)] == [1, 2, 3, 4, 5]
    by_env = _scalars(log_dir / "env_steps", ENV_STEPS_PREFIX + CUMULATIVE_REWARD)
    assert [s for s, _ in by_env] == [1000, 2000, 3000, 4000, 5000]


def test_tensorboard_purges_steps_redone_after_resume(tmp_path: Path) -> None:
    log_dir = tmp_path / "tensorboard"
    first = TensorBoardWriter(log_dir)
    for step in range(1, 6):
        first.write(step, step * 10, {CUMULATIVE_REWARD: 0.0})
    first.close()
    resumed = TensorBoardWriter(log_dir, purge_step=4, purge_env_step=31)
    for step in range(4, 7):
        resumed.write(step, step * 10, {CUMULATIVE_REWARD: 1.0})
    resumed.close()
    assert _scalars(log_dir, CUMULATIVE_REWARD) == [
        (1, 0.0),
        (2, 0.0),
        (3, 0.0),
        (4, 1.0),
        (5, 1.0),
        (6, 1.0),
    ]
    by_env = _scalars(log_dir / "env_steps", ENV_STEPS_PREFIX + CUMULATIVE_REWARD)
    assert [s for s, _ in by_env] == [10, 20, 30, 40, 50, 60]


def test_console_logs_every_n_meta_steps(caplog: pytest.LogCaptureFixture) -> None:
    writer = ConsoleWriter(every=2)
    with caplog.at_level(logging.INFO, logger="meta.observe.reporter"):
        for step in range(1, 5):
            writer.write(step, step * 100, {CUMULATIVE_REWARD: 0.25, "Other/Tag": 1.0})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("Meta-step: 2. Env steps: 200.") and "mean_reward: 0.25" in lines[0]


def test_console_uses_the_csv_names_and_says_when_no_episode_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from meta.observe.reporter import (
        EPISODE_LENGTH,
        META_STEP_COLUMNS,
        OUTER_LR,
        SUCCESS_RATE,
        WEIGHT_DELTA_NORM,
    )
    from meta.run.records import EXTRA_COLUMNS

    scalars = {CUMULATIVE_REWARD: 0.5, SUCCESS_RATE: 0.25, OUTER_LR: 0.1, WEIGHT_DELTA_NORM: 2.0}
    nan = float("nan")
    quiet = {**scalars, CUMULATIVE_REWARD: nan, SUCCESS_RATE: nan, EPISODE_LENGTH: nan}
    with caplog.at_level(logging.INFO, logger="meta.observe.reporter"):
        ConsoleWriter().write(0, 10, scalars)
        ConsoleWriter().write(1, 20, quiet)
    busy, idle = (r.getMessage() for r in caplog.records)
    names = [part.split(": ")[0] for part in busy.rstrip(".").split(". ")[3:]]
    assert names == ["mean_reward", "success_rate", "outer_lr", "theta_delta_norm"]
    assert set(names) <= {*META_STEP_COLUMNS, *EXTRA_COLUMNS}
    assert "theta_delta_norm: 2." in busy  # the outer step, as the CSV's column of that name
    assert "no episode ended" in idle and "nan" not in idle and "outer_lr: 0.1" in idle


def test_reporter_fans_out_and_build_validates(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown stats writers"):
        build_reporter(tmp_path, run_id="r", writers=["console", "mlflow"])
    reporter = build_reporter(
        tmp_path,
        run_id="r",
        writers=["csv", "tensorboard"],
        extra_columns=["seed"],
        inner_columns=["update", "policy_loss"],
    )
    with reporter:
        reporter.write(1, 100, {CUMULATIVE_REWARD: 0.5})
        reporter.write_rows("meta_steps", [_row(1, seed=3)])
        reporter.write_rows("inner_updates", [{"meta_step": 1, "update": 0, "policy_loss": 0.1}])
    assert _read_csv(tmp_path / "meta_steps.csv")[0]["seed"] == "3"
    assert _read_csv(tmp_path / "inner_updates.csv")[0]["policy_loss"] == "0.1"
    assert _scalars(tmp_path / "tensorboard", CUMULATIVE_REWARD) == [(1, 0.5)]


@pytest.mark.heavy
def test_wandb_offline_history_and_persisted_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(key, value)
    wandb_id = "abc12345"
    writer = WandbWriter(tmp_path, "my-run", wandb_id, {"ppo": {"beta": 0.005}})
    for step in range(1, 4):
        writer.write(step, step * 100, {CUMULATIVE_REWARD: step / 2})
    writer.close()
    # wandb's service writes the .wandb log after finish() returns; teardown waits for it, as
    # the process's exit does for meta-train
    import wandb

    wandb.teardown()

    (run_file,) = (tmp_path / "wandb").glob(f"offline-run-*-{wandb_id}/run-{wandb_id}.wandb")
    history = wandb_history(run_file)
    assert [h["meta_step"] for h in history] == [1, 2, 3]
    assert [h[CUMULATIVE_REWARD] for h in history] == [0.5, 1.0, 1.5]
    assert [h["total_env_steps"] for h in history] == [100, 200, 300]

    resumed = WandbWriter(tmp_path, "my-run", wandb_id)
    assert resumed._run is not None and resumed._run.id == wandb_id
    resumed.close()


def test_missing_wandb_only_warns_and_the_other_writers_still_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    with caplog.at_level(logging.WARNING):
        wandb_writer = WandbWriter(tmp_path, "r", "id")
        reporter = StatsReporter([wandb_writer, TensorBoardWriter(tmp_path / "tensorboard")])
    for step in (1, 2):
        reporter.write(step, step * 10, {CUMULATIVE_REWARD: float(step)})
    reporter.close()
    assert _scalars(tmp_path / "tensorboard", CUMULATIVE_REWARD) == [(1, 1.0), (2, 2.0)]
    assert wandb_writer._run is None and not (tmp_path / "wandb").exists()
    (warning,) = [r.getMessage() for r in caplog.records if "wandb" in r.getMessage()]
    assert warning.startswith("wandb could not start (ModuleNotFoundError: ")
    assert warning.endswith("continuing without wandb")
