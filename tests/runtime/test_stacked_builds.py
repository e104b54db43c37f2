"""Builds in a stack: each member steps builds of its own, and the members update as one stack."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.request import Task, TrainRequest
from meta.config import EnvConfig
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import LocalExecutor
from meta.runtime.jobs import Training

pytestmark = [
    pytest.mark.integration,  # builds are processes
    pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*"),
]


def test_a_stack_on_builds_trains_bitwise_as_the_same_stack_on_the_native_tasks(
    free_ports: Callable[..., int],
) -> None:
    native = EnvConfig(num_areas=4)
    builds = replace(native, backend="unity", base_port=free_ports(EnvPool(native).span))
    network, ppo = (
        NetworkConfig(hidden_units=16),
        PPOConfig(max_steps=512, buffer_size=256, batch_size=128),
    )
    theta = cpu_weights(policy_for(EnvPool(native).env("FindTarget", {}, 0), network, seed=3))
    tasks = [
        Task("FindTarget", {}),
        Task("CarryObject", {"agent_speed": 0.4}),
        Task("FindTarget", {}),
    ]
    jobs = [Training(TrainRequest((t,), theta, 70 + i, ppo, network)) for i, t in enumerate(tasks)]
    pool = EnvPool(builds)
    try:
        on_builds = list(LocalExecutor(pool).run(jobs))
        assert sorted(pool._builds) == [("CarryObject", 1), ("FindTarget", 0), ("FindTarget", 2)]
    finally:
        pool.close()
    on_native = list(LocalExecutor(EnvPool(native)).run(jobs))
    for b, n in zip(on_builds, on_native, strict=True):
        assert all(torch.equal(b.weights[k], n.weights[k]) for k in n.weights)
        assert any(not torch.equal(n.weights[k], theta[k]) for k in theta)  # it trained
    assert any(not torch.equal(on_native[0].weights[k], on_native[2].weights[k]) for k in theta)
