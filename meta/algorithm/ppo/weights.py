"""Copies of weights and optimizer state that leave the device and the autograd graph."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

from meta.algorithm.ppo.optim import Optimizer

Weights = dict[str, torch.Tensor]
"""A state_dict: parameter and buffer names to tensors (θ, a trained φ, a snapshot)."""
OptimizerState = dict[str, Any]
"""An optimizer's state_dict (Adam's moments and step counts), on the CPU."""


def cpu_copy(weights: Mapping[str, torch.Tensor]) -> Weights:
    """A detached CPU copy of a state_dict (a new tensor even where it is on the CPU already)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}


def cpu_weights(module: torch.nn.Module) -> Weights:
    """A detached CPU copy of a module's state_dict."""
    return cpu_copy(module.state_dict())


def optimizer_cpu_state(optimizer: Optimizer) -> OptimizerState:
    """A CPU copy of the optimizer's state_dict (what a checkpoint stores)."""
    state = copy.deepcopy(optimizer.state_dict())
    for slots in state["state"].values():
        for name, value in slots.items():
            if isinstance(value, torch.Tensor):
                slots[name] = value.detach().to("cpu")
    return state
