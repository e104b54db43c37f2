"""Inner trainings on Ray actors: the same θ as in-process, bitwise; lost actors replaced."""

from __future__ import annotations

import csv
import operator
import os
import signal
from collections.abc import Callable

import pytest
import torch

from meta.algorithm.ppo.weights import Weights
from meta.config import Config, EnvConfig
from meta.config.runtime import RuntimeConfig
from meta.process.compute import matmul_precision
from meta.runtime.actors import RayExecutor
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import Call
from meta.trainer import MetaTrainer, plan_training

Factory = Callable[..., Config]
BATCH = ("meta.meta_batch_size=4", "meta.steps=3")
RAY = ("runtime=ray", "runtime.num_actors=2")


def thetas(cfg: Config, run_id: str, steps: int) -> list[Weights]:
    """θ after each of the first `steps` meta-steps."""
    trainer = MetaTrainer(plan_training(cfg, run_id), "{}", {})
    try:
        out = []
        for k in range(steps):
            trainer.meta_step_once(k)
            out.append({name: value.clone() for name, value in trainer.theta.items()})
        return out
    finally:
        trainer.close()


def same(a: Weights, b: Weights) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.usefixtures("ray_cluster")
def test_ray_gives_the_local_theta_bitwise_after_every_meta_step(tiny_config: Factory) -> None:
    local = thetas(tiny_config(*BATCH), "local", 3)
    ray = thetas(tiny_config(*BATCH, *RAY), "ray", 3)
    assert all(same(a, b) for a, b in zip(local, ray, strict=True))
    assert not same(local[0], local[1])


@pytest.mark.usefixtures("ray_cluster")
def test_chained_trainings_run_in_order_on_ray_and_match_local(tiny_config: Factory) -> None:
    carry = ("meta.meta_batch_size=2", "meta.inner_optimizer=carry")
    local = thetas(tiny_config(*carry), "local", 2)
    ray = thetas(tiny_config(*carry, *RAY), "ray", 2)
    assert all(same(a, b) for a, b in zip(local, ray, strict=True))


PRECISION = Call(operator.call, torch.get_float32_matmul_precision)
"""The worker's float32 matmul precision (a job of torch's and the standard library's only)."""


@pytest.mark.usefixtures("ray_cluster")
def test_actors_take_the_matmul_precision_their_executor_was_made_with() -> None:
    with matmul_precision("medium"):
        executor = RayExecutor(RuntimeConfig(backend="ray", num_actors=1), EnvConfig(), None)
    try:
        assert list(executor.run([PRECISION])) == ["medium"]
    finally:
        executor.close()


@pytest.mark.usefixtures("ray_cluster")
def test_a_killed_actor_is_replaced_and_its_job_retried_from_theta(
    tiny_config: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    local = thetas(tiny_config(*BATCH), "local", 3)
    cfg = tiny_config(*BATCH, *RAY)
    trainer = MetaTrainer(plan_training(cfg, "killed"), "{}", {})
    try:
        trainer.meta_step_once(0)
        executor = trainer.inner.start_executor()
        before = executor.pids()  # type: ignore[attr-defined]
        os.kill(before[1], signal.SIGKILL)
        with caplog.at_level("WARNING"):
            trainer.meta_step_once(1)
        assert trainer.inner.restarts == 1 and "A Ray actor was lost" in caplog.text
        after = executor.pids()  # type: ignore[attr-defined]
        assert after[0] == before[0] and after[1] != before[1]
        run_dir = trainer.run()  # meta-step 2, then the final weights
        assert same(trainer.theta, local[-1])  # the retried job trained exactly as before
    finally:
        trainer.close()
    with (run_dir / "meta_steps.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [(r["meta_step"], r["task_index"]) for r in table] == [
        (str(k), str(i)) for k in range(3) for i in range(4)
    ]


@pytest.mark.usefixtures("ray_cluster")
def test_actors_lost_beyond_max_restarts_stop_the_run_before_the_meta_step_commits(
    tiny_config: Factory,
) -> None:
    cfg = tiny_config(*BATCH, *RAY, "env.max_restarts=0")
    trainer = MetaTrainer(plan_training(cfg, "lost"), "{}", {})
    try:
        trainer.meta_step_once(0)
        os.kill(trainer.inner.start_executor().pids()[0], signal.SIGKILL)  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError, match="max_restarts"):
            trainer.meta_step_once(1)
        assert trainer.meta_step == 1 and trainer.checkpoints.committed == 1
    finally:
        trainer.close()


@pytest.mark.integration
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*")
def test_actors_keep_their_builds_on_ports_of_their_own(
    tiny_config: Factory, free_ports: Callable[..., int]
) -> None:
    builds = ("env=unity", "env.num_areas=8")
    span = EnvPool(tiny_config(*builds).env).span  # worker ids (ports) of one pool
    cfg = tiny_config(
        *BATCH, *RAY, *builds, "meta.steps=2", f"env.base_port={free_ports(3 * span)}"
    )
    trainer = MetaTrainer(plan_training(cfg, "builds"), "{}", {})
    try:
        trainer.run()
        assert trainer.inner.restarts == 0  # no port was taken twice
    finally:
        trainer.close()
    ids = {int(p.stem.split("-")[1]) for p in (trainer.run_dir / "run_logs").glob("Player-*.log")}
    # the driver's pool takes the first block, each of the two actors a block of its own
    assert {i // span for i in ids} == {0, 1, 2}, (ids, span)
    with (trainer.run_dir / "meta_steps.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 8
