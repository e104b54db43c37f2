"""Shared fixtures: the real Hydra composition, shrunk, with outputs under tmp_path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tinyconfig import TINY, compose_config

from envs.backend import ports
from meta.config import Config


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread in the test processes, as meta-train's default (torch_threads=1).

    Each pytest-xdist worker has a core; two threads each would make the workers' OpenMP
    threads wait on each other. Tests of two threads ask for them (`torch_threads(2)`).
    """
    torch.set_num_threads(1)


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., Config]:
    """A factory of tiny configs writing under tmp_path."""

    def make(*overrides: str) -> Config:
        return compose_config([*TINY, f"results_dir={tmp_path / 'results'}", *overrides])

    return make


@pytest.fixture
def free_ports() -> Callable[..., int]:
    """A function: the first of `count` consecutive TCP ports nobody listens on right now."""
    return ports.free_ports


PLAIN_ENV = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
"""The environment without the variables that would make rich colour a piped console."""


def _meta_train(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meta", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**PLAIN_ENV, "WANDB_MODE": "offline"},
    )


@pytest.fixture
def meta_train() -> Callable[..., subprocess.CompletedProcess[str]]:
    """A function: `meta-train <args>` run as a process in `cwd`, wandb offline, output kept."""
    return _meta_train
