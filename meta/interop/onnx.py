"""ML-Agents' ONNX of a policy: the graph `mlagents-learn` 1.1.0 exports and Unity runs.

Input `obs_0` (batch, observations); outputs `version_number` (3), `memory_size` (0),
`continuous_actions` (a sample, `clip(a, -3, 3) / 3`), `continuous_action_output_shape` (the
action size) and `deterministic_continuous_actions` (the mean, clipped the same way); opset 9,
from torch's TorchScript exporter as ML-Agents uses it. The graph is built from ML-Agents'
`Policy` module (`meta.interop.mlagents.to_mlagents`), so it is what that checkpoint holds.
Needs the `onnx` package (a dependency of the project).
"""

from __future__ import annotations

import importlib.util
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from meta.algorithm.ppo.weights import Weights
from meta.errors import first_line
from meta.interop.mlagents import (
    BODY,
    LOG_SIGMA,
    MU,
    NORMALIZERS,
    POLICY,
    InteropError,
    to_mlagents,
)
from meta.process.atomic import atomic_write_bytes

OPSET = 9
"""ML-Agents' `SerializationSettings.onnx_opset`."""
INPUT = "obs_0"
OUTPUTS = (
    "version_number",
    "memory_size",
    "continuous_actions",
    "continuous_action_output_shape",
    "deterministic_continuous_actions",
)


class ExportUnavailable(InteropError):
    """ONNX export needs the `onnx` package, which is not installed."""


class ExportedActor(nn.Module):
    """ML-Agents' `SimpleActor.forward` for a vector observation and continuous actions."""

    version_number: torch.Tensor
    memory_size_vector: torch.Tensor
    continuous_act_size_vector: torch.Tensor
    running_mean: torch.Tensor
    running_std: torch.Tensor

    def __init__(self, policy: Mapping[str, torch.Tensor]) -> None:
        super().__init__()
        self.normalize = f"{NORMALIZERS[0]}.running_mean" in policy
        for name in ("version_number", "memory_size_vector", "continuous_act_size_vector"):
            self.register_buffer(name, policy[name].clone())
        if self.normalize:
            prefix = NORMALIZERS[0]
            self.register_buffer("running_mean", policy[f"{prefix}.running_mean"].clone())
            steps = policy[f"{prefix}.normalization_steps"].float()
            self.register_buffer(
                "running_std", torch.sqrt(policy[f"{prefix}.running_variance"] / steps)
            )
        layers = sum(1 for key in policy if key.startswith(BODY) and key.endswith(".weight"))
        self.body = nn.ModuleList(_linear(policy, f"{BODY}.{2 * i}") for i in range(layers))
        self.obs_size = int(policy[f"{BODY}.0.weight"].shape[1])
        self.mu = _linear(policy, MU)
        self.log_sigma = nn.Parameter(policy[LOG_SIGMA].clone(), requires_grad=False)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The five outputs, in ML-Agents' order."""
        x = obs
        if self.normalize:
            x = torch.clamp((x - self.running_mean) / self.running_std, -5, 5)
        x = torch.cat([x], dim=1)  # ML-Agents concatenates its observations' encodings
        for layer in self.body:
            h = layer(x)
            x = torch.mul(h, torch.sigmoid(h))  # ML-Agents' Swish: Sigmoid and Mul for Sentis
        mu = self.mu(x)
        std = torch.exp(mu * 0 + self.log_sigma)  # mu * 0: the batch shape, as ML-Agents does
        sample = mu + torch.randn_like(mu) * std
        return (
            self.version_number,
            self.memory_size_vector,
            torch.clamp(sample, -3, 3) / 3,
            self.continuous_act_size_vector,
            torch.clamp(mu, -3, 3) / 3,
        )


def _linear(policy: Mapping[str, torch.Tensor], prefix: str) -> nn.Linear:
    weight = policy[f"{prefix}.weight"]
    layer = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(policy[f"{prefix}.bias"])
    return layer


def available() -> bool:
    """Whether ONNX export can run here (the `onnx` package is installed)."""
    return importlib.util.find_spec("onnx") is not None


def onnx_bytes(policy: Mapping[str, torch.Tensor]) -> bytes:
    """The ONNX model of ML-Agents' `Policy` module, as bytes."""
    if not available():
        raise ExportUnavailable(
            "ONNX export needs the 'onnx' package, which this installation lacks: pip install onnx"
        )
    # fork_rng: building the layers and tracing randn_like would draw from the global RNG
    with torch.random.fork_rng(devices=[]):
        actor = ExportedActor(policy).eval()
    state = actor.state_dict()
    shapes = tuple((name, tuple(value.shape)) for name, value in state.items())
    template = _EXPORTED.get(shapes)
    refilled = None if template is None else _refilled(template, state)
    if refilled is not None:
        return refilled
    _EXPORTED[shapes] = data = _export(actor)
    return data


_EXPORTED: dict[tuple[tuple[str, tuple[int, ...]], ...], bytes] = {}
"""The first export of each network shape in this process: the graph later weights refill."""


def _refilled(template: bytes, state: Mapping[str, torch.Tensor]) -> bytes | None:
    """`template` with its initializers taken from `state`; None if one has no match there.

    The exporter names each initializer after the module's parameter or buffer (a suffix
    `.1` where an output took the name first), so this gives the bytes a new export would,
    in about 1 ms instead of 30 (tests/interop/test_onnx.py compares the two).
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(template)
    for initializer in model.graph.initializer:
        name = initializer.name
        tensor = state.get(name, state.get(name.rsplit(".", 1)[0]))
        if tensor is None or list(tensor.shape) != list(initializer.dims):
            return None
        initializer.CopyFrom(numpy_helper.from_array(tensor.detach().cpu().numpy(), name))
    return model.SerializeToString()


def _export(actor: ExportedActor) -> bytes:
    try:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
            torch.onnx.export(
                actor,
                (torch.zeros(1, actor.obs_size),),
                Path(tmp) / "policy.onnx",
                opset_version=OPSET,
                input_names=[INPUT],
                output_names=list(OUTPUTS),
                dynamic_axes={INPUT: {0: "batch"}, OUTPUTS[2]: {0: "batch"}},
                dynamo=False,
            )
            return (Path(tmp) / "policy.onnx").read_bytes()
    except Exception as e:  # the exporter's failures are many and version-specific
        raise InteropError(f"ONNX export failed: {first_line(e)}") from None


def export_onnx(theta: Weights, normalize: bool, path: str | Path) -> Path:
    """Write our weights `theta` as ML-Agents' ONNX at `path`; nothing is written on failure."""
    target = Path(path)
    if not target.parent.is_dir():
        raise InteropError(f"cannot write {target}: {target.parent} is not a directory")
    if target.is_dir():
        raise InteropError(f"cannot write {target}: it is a directory")
    data = onnx_bytes(to_mlagents(theta, normalize, 0)[POLICY])
    try:
        atomic_write_bytes(target, data)
    except OSError as e:
        raise InteropError(f"cannot write {target}: {e.strerror or e}") from None
    return target
