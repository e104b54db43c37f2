"""Joining or starting the Ray cluster a run uses; every way that fails is one line."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from meta.config.runtime import RuntimeConfig
from meta.errors import first_line
from meta.process.signals import close_on_exit, held_signals

CONNECT_TIMEOUT_S = 5.0


@dataclass
class Cluster:
    """This process's connection to Ray; shut down at the end only if this process started it."""

    started: bool

    def close(self) -> None:
        """Disconnect (and stop the local cluster this process started); once."""
        import ray

        if self.started and ray.is_initialized():
            ray.shutdown()
        self.started = False


def join_or_start_ray(cfg: RuntimeConfig) -> Cluster:
    """Join Ray as `runtime.address` says, or start a local cluster; RuntimeError in one line.

    A process already connected (a test session, a job of Hydra's Ray launcher) keeps its
    connection. The cluster must have room for every actor, or they would wait forever. Ctrl-C
    and SIGTERM wait for Ray's start-up, then stop the cluster with the program.
    """
    with held_signals() as received:
        try:
            cluster = _connect(cfg)
        except SystemExit as stop:  # ray.init puts in a SIGTERM handler of its own for a while
            if stop.code != signal.SIGTERM:
                raise
            received.append(signal.SIGTERM)
            cluster = Cluster(started=True)
            _shutdown()
        except RuntimeError:  # a start-up that failed under a held signal: the signal is the stop
            if not received:
                raise
            cluster = Cluster(started=False)
            if "ray" in sys.modules:
                _shutdown()
    close_on_exit(cluster.close)
    if received:
        os.kill(os.getpid(), received[0])  # now that the cluster can be stopped with us
    return cluster


def _connect(cfg: RuntimeConfig) -> Cluster:
    try:
        import ray
    except ImportError as error:
        raise RuntimeError("runtime=ray needs Ray: pip install -e '.[ray]'") from error
    cluster = Cluster(started=False)
    if not ray.is_initialized():
        if cfg.address not in (None, "auto"):
            _answers(cfg.address)
        try:
            with _held_sigterm_kept():
                ray.init(
                    # "local" always starts a cluster of our own; None would join a running one
                    address=cfg.address or "local",
                    num_cpus=cfg.num_cpus if cfg.address is None else None,
                    include_dashboard=False,
                    logging_level=logging.ERROR,
                )
        except Exception as error:  # Ray raises ConnectionError, RuntimeError, ValueError...
            where = "start a local Ray cluster" if cfg.address is None else f"join {cfg.address}"
            raise RuntimeError(f"runtime=ray: could not {where}: {first_line(error)}") from error
        cluster.started = True
    _check_room(cfg, cluster)
    return cluster


@contextmanager
def _held_sigterm_kept() -> Iterator[None]:
    """ray.init without replacing the held SIGTERM handler by its own.

    Ray's (`sys.exit(signum)`, set through `ray._private.utils.set_sigterm_handler`: Ray has no
    public switch) raises SystemExit wherever the signal lands; in an at-fork callback CPython
    ignores that exception, the signal is lost and the run goes on. Held, it stops the run once
    Ray has started. A Ray without that function keeps its handler (caught as SystemExit above).
    """
    from ray._private import utils

    original = getattr(utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = original


def _shutdown() -> None:
    """Stop what a ray.init cut short had started."""
    import ray

    ray.shutdown()


def _answers(address: str) -> None:
    """RuntimeError unless something listens at host:port (ray.init would retry for a minute)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise RuntimeError(
            f"runtime.address={address}: nothing answers there ({first_line(error)}); start the "
            "head with `ray start --head` or use runtime.address=auto on a cluster node"
        ) from error


def _check_room(cfg: RuntimeConfig, cluster: Cluster) -> None:
    """RuntimeError when the cluster's CPUs cannot hold num_actors x cpus_per_actor."""
    import ray

    try:
        cfg.check_room(float(ray.cluster_resources().get("CPU", 0.0)))
    except ValueError as error:
        cluster.close()
        raise RuntimeError(str(error)) from None
