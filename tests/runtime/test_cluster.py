"""A signal held through Ray's start-up is the stop, even when the start-up then fails."""

from __future__ import annotations

import os
import signal

import pytest

from meta.config.runtime import RuntimeConfig
from meta.runtime import cluster


def test_a_ctrl_c_during_a_failed_start_up_is_still_a_ctrl_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fails_after_a_ctrl_c(cfg: RuntimeConfig) -> cluster.Cluster:
        os.kill(os.getpid(), signal.SIGINT)  # held: recorded, not raised
        raise RuntimeError("runtime=ray: could not start a local Ray cluster: node timed out")

    monkeypatch.setattr(cluster, "_connect", fails_after_a_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as meta-train has it
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster.join_or_start_ray(RuntimeConfig())
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_failed_start_up_without_a_signal_is_its_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fails(cfg: RuntimeConfig) -> cluster.Cluster:
        raise RuntimeError("runtime=ray: could not start a local Ray cluster: node timed out")

    monkeypatch.setattr(cluster, "_connect", fails)
    with pytest.raises(RuntimeError, match="node timed out"):
        cluster.join_or_start_ray(RuntimeConfig())
