"""Ctrl-C held off while a meta-step is committed, so the run directory never holds half of one."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, so a meta-step is committed whole or not at all."""
    received: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda *args: received.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt
