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
    """Hold Ctrl-C and SIGTERM until the block ends, then raise what arrived.

    Inside a block that holds them already (a group of runs committing one meta-step), what
    arrived passes on to that block, which raises it once the whole group has committed.
    """
    try:
        with held_signals() as received:
            yield received
    finally:
        outer = signal.getsignal(signal.SIGINT)
        if isinstance(outer, _Holder):
            outer.received += received
        elif signal.SIGTERM in received:
            raise Terminated
        elif received:
            raise KeyboardInterrupt


class _Holder:
    """A signal handler that records the signals it is given."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)


@contextmanager
def held_signals() -> Iterator[list[int]]:
    """Record Ctrl-C and SIGTERM in the yielded list while the block runs, raising nothing."""
    holder = _Holder()
    previous = {sig: signal.signal(sig, holder) for sig in HELD}
    try:
        yield holder.received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
