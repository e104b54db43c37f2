"""Training steps take their memory from the heap again instead of faulting fresh pages in."""

from __future__ import annotations

import platform
import resource

import pytest
import torch

from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.loss import Minibatch, gradient_step, make_optimizer
from meta.algorithm.ppo.policy import make_policy
from meta.runtime.allocator import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_gradient_steps_at_the_default_sizes_fault_almost_no_pages_in() -> None:
    assert keep_freed_memory() and keep_freed_memory()  # once per process, then cached
    cfg = PPOConfig()
    policy = make_policy(10, 2, NetworkConfig(), seed=0)
    optimizer = make_optimizer(policy, cfg.learning_rate)
    rows = cfg.batch_size
    g = torch.Generator().manual_seed(0)
    batch = Minibatch(*(torch.randn(rows, *s, generator=g) for s in ((10,), (2,), (), (), (), ())))
    for _ in range(5):
        gradient_step(policy, optimizer, batch, cfg, cfg.epsilon, cfg.beta)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    steps = 40
    for _ in range(steps):
        gradient_step(policy, optimizer, batch, cfg, cfg.epsilon, cfg.beta)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # glibc's defaults: about 400 a step (each 512 KiB activation mapped afresh)
    assert faults / steps < 10, faults
