"""Helpers of the interop tests: the committed ML-Agents 1.1.0 records, and ML-Agents' forward.

`tests/data/mlagents_1.1.0/` holds what real `mlagents-learn` 1.1.0 runs wrote (see the README
there). ML-Agents' forward pass is written out here from its source (`Normalizer`,
`LinearEncoder` with Swish, `GaussianDistribution`, `ActionModel.get_action_out`), to check that
both networks act alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from meta.algorithm.ppo.network import Policy, make_policy
from meta.config.ppo import NetworkConfig
from meta.interop.mlagents import OPTIMIZER, Network
from tests.algorithm.stacking import mean_action, observe

DATA = Path(__file__).parent.parent / "data" / "mlagents_1.1.0"
RECORD = json.loads((DATA / "checkpoints.json").read_text())
RUNS = RECORD["runs"]
IDS = [f"{r['network']['hidden_units']}x{r['network']['num_layers']}" for r in RUNS]


def trained_policy(network: dict[str, Any], seed: int = 0) -> Policy:
    """Our policy for a recorded network, with weights and statistics away from their init."""
    cfg = NetworkConfig(network["hidden_units"], network["num_layers"], network["normalize"])
    policy = make_policy(network["obs_size"], network["action_size"], cfg, seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
        if cfg.normalize:
            obs = 3.0 * torch.randn(700, network["obs_size"], generator=gen) + 1.0
            observe(policy, obs)
    return policy


def synthetic_checkpoint(run: dict[str, Any], seed: int = 1) -> dict[str, Any]:
    """An ML-Agents checkpoint with the record's keys and shapes, filled with plausible values."""
    gen = torch.Generator().manual_seed(seed)
    modules: dict[str, Any] = {}
    for name, keys in run["modules"].items():
        if name == OPTIMIZER:
            params = [torch.nn.Parameter(torch.zeros(1)) for _ in range(keys["params"])]
            modules[name] = torch.optim.Adam(params).state_dict()
            continue
        modules[name] = {k: _value(k, shape, dtype, run, gen) for k, shape, dtype in keys}
    return modules


def _value(key: str, shape: list[int], dtype: str, run: dict[str, Any], gen: Any) -> torch.Tensor:
    leaf = key.rsplit(".", 1)[-1]
    if key in run["constants"]:
        return torch.tensor(run["constants"][key])
    if dtype == "int64":
        return torch.full(shape, 517, dtype=torch.int64)
    if leaf == "running_variance":
        return 517 * (0.5 + torch.rand(shape, generator=gen))
    return 0.3 * torch.randn(shape, generator=gen)


def mlagents_act(policy: dict[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
    """ML-Agents 1.1.0's deterministic environment action, from its `Policy` module."""
    norm = "network_body.observation_encoder.processors.0.normalizer"
    x = obs
    if f"{norm}.running_mean" in policy:
        scale = torch.sqrt(
            policy[f"{norm}.running_variance"] / policy[f"{norm}.normalization_steps"]
        )
        x = torch.clamp((x - policy[f"{norm}.running_mean"]) / scale, -5, 5)
    body = "network_body._body_endoder.seq_layers"
    i = 0
    while f"{body}.{i}.weight" in policy:
        h = x @ policy[f"{body}.{i}.weight"].T + policy[f"{body}.{i}.bias"]
        x, i = h * torch.sigmoid(h), i + 2
    mu = "action_model._continuous_distribution.mu"
    mean = x @ policy[f"{mu}.weight"].T + policy[f"{mu}.bias"]
    return torch.clamp(mean, -3, 3) / 3


def our_act(theta: dict[str, torch.Tensor], network: Network, obs: torch.Tensor) -> torch.Tensor:
    """Our deterministic environment action for weights `theta`."""
    cfg = NetworkConfig(network.hidden_units, network.num_layers, network.normalize)
    policy = make_policy(network.obs_size, network.action_size, cfg, 0)
    policy.load_state_dict(theta)
    with torch.no_grad():
        return mean_action(policy, obs).clamp(-1, 1)


def observations(size: int) -> torch.Tensor:
    """Observations that also drive the normaliser's and the actions' clipping."""
    return 6.0 * torch.randn(256, size, generator=torch.Generator().manual_seed(5))
