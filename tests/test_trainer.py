"""meta-train in-process: run directory, status layout, resume bit-exactness, baselines."""

from __future__ import annotations

import csv
import itertools
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from meta.algorithm import reptile
from meta.algorithm.request import TrainRequest
from meta.algorithm.training import train as train_request
from meta.config import Config
from meta.process.lock import RunLock
from meta.run.checkpoints import load_checkpoint
from meta.run.directory import RunError
from meta.run.status import StatusError
from meta.trainer import MetaTrainer, Stopped, plan_training, train

Factory = Callable[..., Config]


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "meta_steps.csv").open() as f:
        return list(csv.DictReader(f))


def test_run_directory_layout_and_status_format(tiny_config: Factory) -> None:
    cfg = tiny_config("checkpoint.checkpoint_interval=1", "checkpoint.keep_checkpoints=2")
    run_dir = train(cfg, "layout")
    for name in (
        "configuration.yaml",
        "run_logs/training_status.json",
        "run_logs/timers.json",
        "meta_steps.csv",
        "Brain/checkpoint.pt",
        "Brain.pt",
    ):
        assert (run_dir / name).is_file(), name
    kept = sorted(p.name for p in (run_dir / "Brain").glob("Brain-*"))
    assert kept == ["Brain-3072.onnx", "Brain-3072.pt", "Brain-4096.onnx", "Brain-4096.pt"]
    status = json.loads((run_dir / "run_logs/training_status.json").read_text())
    assert status["metadata"]["stats_format_version"] == "0.3.0"
    assert {"mlagents_version", "torch_version"} <= set(status["metadata"])
    brain = status["Brain"]
    assert brain["meta_step"] == 4
    assert [c["file_path"] for c in brain["checkpoints"]] == [  # as ML-Agents writes them
        (run_dir / "Brain" / f"Brain-{steps}.onnx").as_posix() for steps in (3072, 4096)
    ]
    for entry in [*brain["checkpoints"], brain["final_checkpoint"]]:
        assert set(entry) == {
            "steps",
            "file_path",
            "reward",
            "creation_time",
            "auxillary_file_paths",
        }
    table = rows(run_dir)
    assert [int(r["meta_step"]) for r in table] == [0, 1, 2, 3]
    assert {
        "meta_step",
        "task",
        "task_params",
        "inner_steps",
        "mean_reward",
        "success_rate",
        "learning_rate",
        "beta",
        "epsilon",
        "outer_lr",
        "weight_delta_norm",
        "wall_time_s",
    } <= set(table[0])
    assert float(table[0]["learning_rate"]) > float(table[3]["learning_rate"])
    assert float(table[0]["outer_lr"]) > float(table[3]["outer_lr"])
    timers = json.loads((run_dir / "run_logs/timers.json").read_text())
    assert timers["metadata"]["timer_format_version"] == "0.1.0"


def test_resume_is_bitwise_identical_to_an_uninterrupted_run(tiny_config: Factory) -> None:
    straight = train(tiny_config("meta.meta_batch_size=2"), "straight")
    cfg = tiny_config("meta.meta_batch_size=2")
    trainer = MetaTrainer(plan_training(cfg, "interrupted"), "{}", {})
    trainer.meta_step_once(0)
    trainer.meta_step_once(1)
    trainer.close()  # as after a crash or Ctrl-C between meta-steps
    resumed = train(tiny_config("meta.meta_batch_size=2", "resume=true"), "interrupted")
    a, b = weights(straight / "Brain.pt"), weights(resumed / "Brain.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["task_params"] for r in rows(straight)] == [r["task_params"] for r in rows(resumed)]


def test_same_seed_same_weights_other_seed_other_weights(tiny_config: Factory) -> None:
    a = weights(train(tiny_config("meta.steps=2"), "a") / "Brain.pt")
    b = weights(train(tiny_config("meta.steps=2"), "b") / "Brain.pt")
    c = weights(train(tiny_config("meta.steps=2", "seed=1"), "c") / "Brain.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_outer_lr_one_reproduces_sequential_fine_tuning(tiny_config: Factory) -> None:
    cfg = tiny_config("meta.outer_lr=1.0", "meta.meta_batch_size=1", "meta.steps=3")
    run_dir = train(cfg, "sequential")
    checked = plan_training(cfg, "replay")
    theta = MetaTrainer(checked, "{}", {}).theta
    for k in range(3):
        task = checked.sampler.sample(reptile.task_rng(cfg.seed, k))
        seed = reptile.inner_seed(cfg.seed, k, 0)
        env = checked.pool.env(task.family, task.params, seed)
        hyper = reptile.inner_hyper(cfg.ppo, cfg.meta, k)
        request = TrainRequest((), theta, seed, cfg.ppo, cfg.network, hyper)
        theta = train_request(request, env).weights
    final = weights(run_dir / "Brain.pt")
    assert all(torch.equal(final[k], theta[k]) for k in final)


def test_initialize_from_starts_at_that_runs_weights(tiny_config: Factory) -> None:
    source = train(tiny_config("meta.steps=1"), "source")
    cfg = tiny_config("initialize_from=source")
    trainer = MetaTrainer(plan_training(cfg, "child"), "{}", {})
    start = load_checkpoint(source / "Brain/checkpoint.pt")["theta"]
    assert all(torch.equal(trainer.theta[k], start[k]) for k in start)
    trainer.close()


@pytest.mark.parametrize("algorithm", ["joint", "single"])
def test_baselines_run_and_spend_reptiles_budget(tiny_config: Factory, algorithm: str) -> None:
    run_dir = train(
        tiny_config(
            f"meta={algorithm}", "experiment=tiny", "meta.steps=2", "meta.meta_batch_size=2"
        ),
        algorithm,
    )
    table = rows(run_dir)
    assert [r["algorithm"] for r in table] == [algorithm] * 2
    assert all(int(r["inner_steps"]) >= 2 * 1024 for r in table)


def test_force_starts_over(tiny_config: Factory) -> None:
    run_dir = train(tiny_config("meta.steps=2"), "again")
    train(tiny_config("meta.steps=1", "force=true"), "again")
    assert [int(r["meta_step"]) for r in rows(run_dir)] == [0]


def test_resume_of_missing_run_and_broken_status(tiny_config: Factory) -> None:
    with pytest.raises(RunError, match="does not exist"):
        plan_training(tiny_config("resume=true"), "nothing")
    run_dir = train(tiny_config("meta.steps=1"), "broken")
    status = run_dir / "run_logs/training_status.json"
    status.write_text("{not json")
    with pytest.raises(StatusError, match="invalid JSON"):
        plan_training(tiny_config("resume=true"), "broken")
    status.write_text('{"Brain": {}}')
    with pytest.raises(StatusError, match="metadata"):
        plan_training(tiny_config("resume=true"), "broken")
    assert status.read_text() == '{"Brain": {}}'


def test_initialize_from_missing_run(tiny_config: Factory) -> None:
    with pytest.raises(RunError, match="no weights"):
        plan_training(tiny_config("initialize_from=ghost"), "child")


def test_brain_onnx_is_written_beside_brain_pt_or_warns(
    tiny_config: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib.util

    run_dir = train(tiny_config("meta.steps=1"), "onnx")
    if importlib.util.find_spec("onnx") is None:
        assert "ONNX export skipped" in caplog.text
    else:
        assert (run_dir / "Brain.onnx").is_file()
    assert (run_dir / "Brain.pt").is_file()


@pytest.mark.parametrize(
    "overrides", [("meta=joint", "experiment=tiny"), ("meta.inner_optimizer=carry",)]
)
def test_carried_optimizer_is_checkpointed_and_resumes_bitwise(
    tiny_config: Factory, overrides: tuple[str, ...]
) -> None:
    # joint (and reptile with inner_optimizer=carry) continue one Adam across meta-steps: its
    # state is in the checkpoint, so an interrupted run resumes to the same weights.
    straight = train(tiny_config(*overrides, "meta.steps=3"), "straight")
    trainer = MetaTrainer(plan_training(tiny_config(*overrides, "meta.steps=3"), "cut"), "{}", {})
    trainer.meta_step_once(0)
    trainer.close()
    state = torch.load(trainer.run_dir / "Brain/checkpoint.pt", weights_only=True)
    assert int(max(s["step"] for s in state["optimizer"]["state"].values())) > 0
    resumed = train(tiny_config(*overrides, "meta.steps=3", "resume=true"), "cut")
    a, b = weights(straight / "Brain.pt"), weights(resumed / "Brain.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_fresh_inner_optimizer_keeps_no_state_and_carry_changes_training(
    tiny_config: Factory,
) -> None:
    fresh = train(tiny_config("meta.steps=2"), "fresh")
    assert torch.load(fresh / "Brain/checkpoint.pt", weights_only=True)["optimizer"] is None
    carry = train(tiny_config("meta.steps=2", "meta.inner_optimizer=carry"), "carry")
    a, b = weights(fresh / "Brain.pt"), weights(carry / "Brain.pt")
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_joint_is_one_run_its_adam_steps_add_up_and_its_rate_anneals_per_update(
    tiny_config: Factory,
) -> None:
    cfg = tiny_config("meta=joint", "experiment=tiny", "meta.steps=2", "logger.per_update_csv=true")
    run_dir = train(cfg, "joint")
    state = torch.load(run_dir / "Brain/checkpoint.pt", weights_only=True)["optimizer"]
    with (run_dir / "inner_updates.csv").open() as f:
        updates = list(csv.DictReader(f))
    minibatches = (cfg.ppo.buffer_size // cfg.ppo.batch_size) * cfg.ppo.num_epoch
    assert int(next(iter(state["state"].values()))["step"]) == len(updates) * minibatches
    rates = [float(u["Policy/Learning Rate"]) for u in updates]
    assert rates[0] == pytest.approx(cfg.ppo.learning_rate)
    assert all(a > b for a, b in itertools.pairwise(rates))  # no constant chunks
    assert {"Policy/Approx KL", "Policy/Clip Fraction", "Policy/Explained Variance"} <= set(
        updates[0]
    )


def test_the_library_takes_the_run_lock_and_stops_as_meta_train(tiny_config: Factory) -> None:
    """train(cfg) runs meta-train's path: a held run is refused with meta-train's one line."""
    cfg = tiny_config("meta.steps=1")
    lock = RunLock(cfg.results_dir, "held")
    lock.acquire()
    try:
        with pytest.raises(Stopped, match="run 'held' is in use by") as stopped:
            train(cfg, "held")
        assert stopped.value.code == 1
        assert not (Path(cfg.results_dir) / "held").exists()
    finally:
        lock.release()
    assert train(cfg, "held").name == "held"  # released: the run goes ahead
    assert not lock.path.exists()  # and the run released its own lock


def test_the_library_gives_the_callers_signal_handlers_back(tiny_config: Factory) -> None:
    """meta-train's handlers hold while the run trains, the caller's are back when it returns."""
    seen: list[int] = []

    def mine(signum: int, _: object) -> None:
        seen.append(signum)

    before = signal.signal(signal.SIGTERM, mine)
    try:
        train(tiny_config("meta.steps=1"), "handlers")
        assert signal.getsignal(signal.SIGTERM) is mine
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_library_runs_at_the_runs_matmul_precision_and_gives_the_callers_back(
    tiny_config: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from meta.trainer import session

    during: list[str] = []
    real = session.run

    def spy(*args: object, **kwargs: object) -> Path:
        during.append(torch.get_float32_matmul_precision())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(session, "run", spy)
    torch.set_float32_matmul_precision("high")
    try:
        train(tiny_config("meta.steps=1", "torch_matmul_precision=medium"), "precision")
        assert during == ["medium"]
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision("highest")
