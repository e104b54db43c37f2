"""Ctrl-C and SIGTERM: held off while a meta-step commits, so a run never holds half of one."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

HELD = (signal.SIGINT, signal.SIGTERM)


class Terminated(BaseException):
    """SIGTERM arrived (a scheduler, `kill`): handled like Ctrl-C, exit code 143."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def install_sigterm() -> None:
    """Turn SIGTERM into Terminated, so it unwinds like KeyboardInterrupt does."""
    signal.signal(signal.SIGTERM, _raise_terminated)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then raise what arrived."""
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _: received.append(signum)) for sig in HELD}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if signal.SIGTERM in received:
            raise Terminated
        if received:
            raise KeyboardInterrupt
