"""The deployable part of a policy: observations in, clipped mean actions out (Brain.onnx)."""

from __future__ import annotations

from pathlib import Path

import torch

from meta.algorithm.ppo.policy import Policy
from meta.run.checkpoints import CheckpointManager


class DeterministicActor(torch.nn.Module):
    """The policy's mean action, clipped to [-1, 1]: what a deployed build would run."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations to actions."""
        action, _, _ = self.policy.act(obs, deterministic=True)
        return torch.clamp(action, -1.0, 1.0)


def export_actor(checkpoints: CheckpointManager, policy: Policy) -> Path | None:
    """Write the run's Brain.onnx (None, with a warning, when ONNX export is unavailable)."""
    example = torch.zeros(1, policy.normalizer.mean.shape[0])
    return checkpoints.export_onnx(DeterministicActor(policy).eval(), example)
