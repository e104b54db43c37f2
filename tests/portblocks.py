"""Ports for the builds a test launches, held by that test alone on this machine.

A port picked because nothing listened on it a moment ago can be taken before the build binds
it: by another test of the suite, another suite on the machine, or the kernel handing it out as
an ephemeral port. The tests take their ports instead from blocks below the kernel's ephemeral
range, each block claimed with an advisory lock on a file (as `meta.runtime.slots` claims
build slots), held until the test ends and released when its process ends, whatever ends it.
"""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from envs.backend.host import is_free

FIRST, LAST, BLOCK = 20000, 32768, 128
"""The blocks: [20000, 32768) lies below Linux's default ephemeral range (32768-60999)."""
LOCKS = Path(tempfile.gettempdir()) / "meta-harness-test-ports"


def _claim() -> tuple[int, IO[str]]:
    """The first block no other process holds, and its lock's open file."""
    LOCKS.mkdir(exist_ok=True)
    for first in range(FIRST, LAST - BLOCK + 1, BLOCK):
        handle = open(LOCKS / f"{first}.lock", "a")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        if all(is_free(port) for port in range(first, first + BLOCK)):
            return first, handle
        handle.close()  # a service of the machine listens in it: the next block
    raise RuntimeError(f"every block of {BLOCK} test ports in [{FIRST}, {LAST}) is taken")


@contextlib.contextmanager
def port_blocks() -> Iterator[Callable[..., int]]:
    """A function `take(count)`: the first of `count` consecutive ports that no one else on
    the machine is given until the block of this context is released."""
    held: list[IO[str]] = []
    block = {"next": 0, "end": 0}

    def take(count: int = 1) -> int:
        if count > BLOCK:
            raise ValueError(f"{count} ports: a block holds {BLOCK}")
        if block["next"] + count > block["end"]:
            first, handle = _claim()
            held.append(handle)
            block["next"], block["end"] = first, first + BLOCK
        port = block["next"]
        block["next"] += count
        return port

    try:
        yield take
    finally:
        for handle in held:
            handle.close()  # closing the file releases the lock
