"""The state_dict type every module imports, and copies of weights off the device and graph."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from meta.algorithm.ppo.optim import OptimizerState

__all__ = ["OptimizerState", "Weights", "cpu_copy", "cpu_weights"]

Weights = dict[str, torch.Tensor]
"""A state_dict: parameter and buffer names to tensors (θ, a trained φ, a snapshot)."""


def cpu_copy(weights: Mapping[str, torch.Tensor]) -> Weights:
    """A detached CPU copy of a state_dict (a new tensor even where it is on the CPU already)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}


def cpu_weights(module: torch.nn.Module) -> Weights:
    """A detached CPU copy of a module's state_dict."""
    return cpu_copy(module.state_dict())
