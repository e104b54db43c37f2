"""Blocks of build ports claimed on a node, so that concurrent jobs never launch on the same one.

A meta-eval job that adapts on Unity builds takes a slot (a block of worker ids, see
`EnvPool.slot`) that no other process on the machine holds: an advisory lock on a file per
base port and slot, held while the job runs and released when its process ends, whatever ends it.
Slot 0 stays the driver's.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

LOCKS = Path(tempfile.gettempdir()) / "meta-harness-slots"
"""Where the lock files live (one per base port and slot)."""


def claim(base_port: int, first: int = 1, limit: int = 1024) -> tuple[int, IO[str]]:
    """The first slot from `first` that no process on this machine holds, and the open file
    whose lock holds it (closing the file releases it)."""
    LOCKS.mkdir(exist_ok=True)
    for slot in range(first, first + limit):
        handle = open(LOCKS / f"{base_port}-{slot}.lock", "a")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return slot, handle
    raise RuntimeError(f"all {limit} build slots of base port {base_port} are taken")


@contextmanager
def claimed_slot(base_port: int, first: int = 1, limit: int = 1024) -> Iterator[int]:
    """The first slot from `first` that no process on this machine holds, held until exit."""
    slot, handle = claim(base_port, first, limit)
    try:
        yield slot
    finally:
        handle.close()
