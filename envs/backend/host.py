"""What builds take from the machine: the Python they run, and free TCP ports to listen on.

A built-in build (``envs/builds/<Family>.x86_64``) is a shell script that starts
``envs.unity.player`` with ``$META_HARNESS_PYTHON``, else the project's ``.venv`` beside
``envs/``, else ``python3`` on PATH. A trainer started by the full path of a venv that is not
activated (and not the project's ``.venv``) would otherwise launch a ``python3`` without the
project's packages, and the build would die at its first import. A build listens on a base port
and the ports after it, one per worker.
"""

from __future__ import annotations

import os
import socket
import sys

BUILD_PYTHON = "META_HARNESS_PYTHON"
"""The environment variable the built-in builds read their interpreter from."""


def use_this_interpreter() -> None:
    """Let builds launched from this process run this process's interpreter (unless set)."""
    os.environ.setdefault(BUILD_PYTHON, sys.executable)


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
