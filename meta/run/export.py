"""A run's weights as ML-Agents writes them: its checkpoint modules, and the ONNX Unity runs."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from meta.algorithm.ppo.weights import Weights
from meta.config.ppo import NetworkConfig
from meta.interop.mlagents import POLICY, InteropError, to_mlagents
from meta.interop.onnx import ExportUnavailable, onnx_bytes

logger = logging.getLogger(__name__)

CONFIG_FILE = "configuration.yaml"
"""The run's configuration in force (meta.run.directory writes it)."""


def run_network(run_dir: Path) -> NetworkConfig:
    """The run's network settings, from its configuration (fixed for the life of a run)."""
    path = run_dir / CONFIG_FILE
    saved = yaml.safe_load(path.read_text()) if path.is_file() else None
    section = saved.get("network") if isinstance(saved, dict) else None
    if not isinstance(section, dict):
        return NetworkConfig()
    names = ("hidden_units", "num_layers", "normalize")
    return NetworkConfig(**{name: section[name] for name in names if name in section})


class MLAgentsExport:
    """Turns θ into ML-Agents' checkpoint modules and ONNX; warns once when ONNX cannot be had."""

    def __init__(self, network: NetworkConfig) -> None:
        self.network = network
        self._warned = False

    def modules(self, theta: Weights, step: int) -> dict[str, Any]:
        """ML-Agents' `Policy`, `global_step` and optimizer modules for θ at env step `step`."""
        return to_mlagents(theta, self.network.normalize, step)

    def onnx(self, modules: Mapping[str, Any]) -> bytes | None:
        """The ONNX of `modules`' policy; None, with one warning per run, if it cannot be made."""
        try:
            return onnx_bytes(modules[POLICY])
        except ExportUnavailable as e:
            self._warn(f"ONNX export skipped: {e}")
        except InteropError as e:
            self._warn(str(e))
        return None

    def _warn(self, message: str) -> None:
        if not self._warned:
            logger.warning("%s; the checkpoints are written without .onnx", message)
            self._warned = True
