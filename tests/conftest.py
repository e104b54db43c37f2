"""Shared fixtures: the real Hydra composition, shrunk, with outputs under tmp_path."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from meta.cli import CONFIG_DIR, register_configs
from meta.config import Config

TINY = ["experiment=tiny", "logger=quiet"]


def compose_config(overrides: list[str]) -> Config:
    """Compose conf/config.yaml with overrides, as meta-train does, into the dataclasses."""
    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., Config]:
    """A factory of tiny configs writing under tmp_path."""

    def make(*overrides: str) -> Config:
        return compose_config([*TINY, f"results_dir={tmp_path / 'results'}", *overrides])

    return make


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("localhost", port))
        except OSError:
            return False
    return True


@pytest.fixture
def free_ports() -> Callable[..., int]:
    """A function: the first of `count` consecutive TCP ports nobody listens on right now."""

    def first_of(count: int = 1) -> int:
        for _ in range(100):
            with socket.socket() as probe:
                probe.bind(("localhost", 0))
                first = int(probe.getsockname()[1])
            if first + count < 65536 and all(_port_free(first + i) for i in range(1, count)):
                return first
        raise RuntimeError(f"no {count} consecutive free ports")

    return first_of
