"""Training steps take their memory from the heap again instead of faulting fresh pages in."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# In a fresh interpreter: how many pages a process faults in depends on what it did before
# (what earlier tests left in the heap), not only on the setting under test.
MEASURE = """
import resource, torch
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import PolicyStack
from meta.algorithm.ppo.network import make_policy
from meta.algorithm.ppo.train import make_optimizer
from meta.algorithm.ppo.update import actor_loss, critic_loss
from meta.algorithm.ppo.update import gradient_step, hyper_tensors
from meta.process.compute import keep_freed_memory
torch.set_num_threads(1)
if KEEP:
    assert keep_freed_memory() and keep_freed_memory()  # once per process, then cached
cfg = PPOConfig()
network = NetworkConfig()
weights = make_policy(10, 2, network, seed=0).state_dict()
policy = PolicyStack([weights], network.normalize, network.normalizer_epsilon, "cpu")
optimizer = make_optimizer(policy, cfg)
hyper = hyper_tensors([Hyper.of(cfg)], policy.device)
g = torch.Generator().manual_seed(0)
names = ("features", "actions", "old_log_probs", "old_values", "advantages", "returns")
shapes = ((10,), (2,), (), (), (), ())
batch = {n: torch.randn(1, cfg.batch_size, *s, generator=g) for n, s in zip(names, shapes)}
losses = (actor_loss, critic_loss)
for _ in range(5):
    gradient_step(policy, optimizer, batch, cfg, hyper, losses)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(STEPS):
    gradient_step(policy, optimizer, batch, cfg, hyper, losses)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / STEPS)
"""
STEPS = 200
"""Long enough that a one-off growth of the heap (a few hundred pages, once) is not read as
what every step costs; glibc's defaults fault hundreds of pages in at every step."""


def faults_per_step(keep: bool) -> float:
    """Minor page faults per default gradient step in a fresh process."""
    code = f"KEEP = {keep}\nSTEPS = {STEPS}\n{MEASURE}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_gradient_steps_at_the_default_sizes_fault_almost_no_pages_in() -> None:
    kept, default = faults_per_step(True), faults_per_step(False)
    # glibc's defaults: hundreds a step (each 512 KiB activation mapped afresh)
    assert kept < 10 < default, (kept, default)
