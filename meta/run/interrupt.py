"""Ctrl-C and SIGTERM: one line and exit code 130 / 143 at any instant, never half a meta-step.

A program goes through three regimes. Before it writes, `meta.run.signals.exit_at_once` ends
it on the spot. While it writes, `raise_on_signals` turns a signal into an exception the run
unwinds from (a meta-step's commit holds it off with `deferred_interrupt`). Once its results
are complete, `exit_at_once` again, with a line saying so.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from meta.run.signals import HELD


class Terminated(BaseException):
    """SIGTERM arrived (a scheduler, `kill`): handled like Ctrl-C, exit code 143."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def raise_on_signals() -> None:
    """From now on Ctrl-C raises KeyboardInterrupt and SIGTERM Terminated."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)


@contextmanager
def deferred_interrupt() -> Iterator[list[int]]:
    """Hold Ctrl-C and SIGTERM until the block ends, then raise what arrived."""
    try:
        with held_signals() as received:
            yield received
    finally:
        if signal.SIGTERM in received:
            raise Terminated
        if received:
            raise KeyboardInterrupt


@contextmanager
def held_signals() -> Iterator[list[int]]:
    """Record Ctrl-C and SIGTERM in the yielded list while the block runs, raising nothing."""
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _: received.append(signum)) for sig in HELD}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
