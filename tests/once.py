"""What the tests only read, made once per session for every pytest-xdist worker.

A module- or session-scoped fixture alone is made once per worker: twice on two cores when
its tests are shared out. The `made_once` fixture (tests/conftest.py) makes it once: the first
worker to ask makes it under a file lock, the others wait for it, then all read it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

MadeOnce = Callable[[str, Callable[[Path], object]], Path]
"""made_once(name, make): the directory `name`, filled by `make(directory)` once a session."""


def made_under(base: Path) -> MadeOnce:
    """made_once for the session whose pytest base directory (or a worker's) is `base`."""
    root = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base  # above each worker's

    def made(name: str, make: Callable[[Path], object]) -> Path:
        directory, done = root / f"once-{name}", root / f"once-{name}.done"
        with (root / f"once-{name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
            if not done.exists():  # not made yet, or a worker's attempt failed
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir()
                make(directory)
                done.touch()
        return directory

    return made
