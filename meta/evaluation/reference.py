"""Sumo's fixed reference player of games: `python -m meta.evaluation.reference` makes it.

The ghost trainer on Sumo's default task with the learning test's budget (64 areas, 500,000
learning-team agent-steps, buffers of 4,096, batches of 512, learning rate 1e-3, 64 hidden
units, ML-Agents' self_play defaults), seed 0, on CPU with one thread. The file holds its
network settings beside its weights, so it plays against a run whatever the run's network, and
the machine that made it (`made_on`): PyTorch promises bitwise results only on the same
release and CPU kernels, so the learning test (tests/selfplay/test_selfplay_trainer.py), which
runs this same training, compares weights bit for bit only where `made_on` matches.
"""

from __future__ import annotations

import dataclasses
import platform

import torch

import envs
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.training import train as train_request
from meta.config.ppo import NetworkConfig, PPOConfig, SelfPlayConfig
from meta.evaluation.games import REFERENCE as OUT
from meta.observe.machine import cpu_blocks

NETWORK = NetworkConfig(hidden_units=64)


def budget() -> PPOConfig:
    """The learning test's settings."""
    return PPOConfig(
        max_steps=500_000,
        buffer_size=4096,
        batch_size=512,
        learning_rate=1e-3,
        self_play=SelfPlayConfig(),
    )


def machine() -> dict[str, str]:
    """What decides bitwise results on CPU: torch's release, the CPU's vendor, its kernels."""
    vendor = platform.processor() or platform.machine()
    blocks = cpu_blocks()
    vendor = blocks[0].get("vendor_id", vendor) if blocks else vendor
    capability = torch.backends.cpu.get_cpu_capability()
    return {"torch": torch.__version__, "cpu": vendor, "capability": capability}


def train(seed: int = 0) -> tuple[TrainResult, dict[str, torch.Tensor]]:
    """The training from scratch and its start (environment, start and training seeds shifted)."""
    torch.set_num_threads(1)
    env = envs.make("Sumo", num_areas=64, seed=1 + seed)
    theta = policy_for(env, NETWORK, seed=seed).state_dict()
    request = TrainRequest((), theta, 3 + seed, budget(), NETWORK)
    return train_request(request, env), theta


def main() -> None:
    """Train the reference and write it."""
    result, _ = train()
    made = {"network": dataclasses.asdict(NETWORK), "weights": result.weights, "made_on": machine()}
    torch.save(made, OUT)
    assert result.self_play_state is not None
    elo, steps = result.self_play_state["elo"], result.stats["steps"]
    print(f"{OUT.name}: ELO {elo:.1f} after {steps:.0f} steps")


if __name__ == "__main__":
    main()
