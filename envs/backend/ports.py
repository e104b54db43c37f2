"""Free TCP ports for builds: a base port whose next ports are free too."""

from __future__ import annotations

import socket


def is_free(port: int) -> bool:
    """Whether nothing on this machine is bound to `port` on localhost."""
    with socket.socket() as probe:
        try:
            probe.bind(("localhost", port))
        except OSError:
            return False
    return True


def free_ports(count: int = 1) -> int:
    """The first of `count` consecutive TCP ports nobody listens on right now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("localhost", 0))
            first = int(probe.getsockname()[1])
        if first + count < 65536 and all(is_free(first + i) for i in range(1, count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports")
