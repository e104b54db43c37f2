"""One executor stack: the same jobs give the same results in this process and in workers."""

from __future__ import annotations

import operator

import pytest
import torch

import envs
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.request import Task, TrainRequest
from meta.config import EnvConfig
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.process.compute import matmul_precision
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import LocalExecutor, ProcessExecutor, retrying
from meta.runtime.jobs import Call, Training

SMALL = PPOConfig(batch_size=128, buffer_size=256, max_steps=512, num_epoch=1)
NETWORK = NetworkConfig(hidden_units=16)
ENV = EnvConfig(num_areas=4)


def _requests() -> list[Training]:
    task = Task("FindTarget", {})
    start = policy_for(envs.make(task.family, num_areas=4, seed=0), NETWORK, seed=3).state_dict()
    return [Training(TrainRequest((task,), start, seed, SMALL, NETWORK)) for seed in (0, 1, 2)]


def test_training_requests_give_the_same_weights_in_worker_processes() -> None:
    jobs = _requests()
    local = list(LocalExecutor(EnvPool(ENV)).run(jobs))
    workers = ProcessExecutor(2, ENV)
    try:
        parallel = list(workers.run(jobs))
    finally:
        workers.close()
    assert len(parallel) == len(jobs)
    for mine, theirs in zip(local, parallel, strict=True):
        assert all(torch.equal(mine.weights[k], theirs.weights[k]) for k in mine.weights)
    start, first = jobs[0].request.weights, local[0].weights
    assert any(not torch.equal(first[k], start[k]) for k in first)  # it trained
    assert any(not torch.equal(first[k], local[1].weights[k]) for k in first)  # seeds differ


def test_calls_come_back_in_the_jobs_order() -> None:
    workers = ProcessExecutor(2, ENV)
    try:
        assert list(workers.run([Call(abs, -n) for n in range(6)])) == list(range(6))
    finally:
        workers.close()


PRECISION = Call(operator.call, torch.get_float32_matmul_precision)
"""The worker's float32 matmul precision (a job of torch's and the standard library's only)."""


def test_workers_take_the_matmul_precision_of_the_process_that_starts_them() -> None:
    with matmul_precision("medium"):
        medium = ProcessExecutor(1, ENV)
    default = ProcessExecutor(1, ENV)
    try:
        assert list(medium.run([PRECISION])) == ["medium"]
        assert list(default.run([PRECISION])) == ["highest"]
    finally:
        medium.close()
        default.close()


def test_retrying_gives_up_after_its_budget_with_the_last_crash() -> None:
    on_crash = retrying(2)
    on_crash(RuntimeError("first"))
    on_crash(RuntimeError("second"))
    with pytest.raises(RuntimeError, match=r"^third$"):
        on_crash(RuntimeError("third"))
