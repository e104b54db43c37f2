"""Ctrl-C and SIGTERM: one line and exit code 130 / 143 at any instant, never half a meta-step.

A program goes through three regimes. Before it writes, `exit_at_once` ends it on the spot,
with one line. While it writes, `raise_on_signals` turns a signal into an exception the run
unwinds from (a meta-step's commit holds it off with `deferred_interrupt`). Once its results
are complete, `exit_at_once` again, with a line saying so.

Imports only a few standard modules, so that the console scripts install it as their first
instruction (`meta.launch`). What must not outlive the program (a local Ray cluster it started)
registers its `close` with `close_on_exit`; the handler runs it before exiting.
"""

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

HELD = (signal.SIGINT, signal.SIGTERM)
BEFORE_START = "interrupted before the run started; nothing was written"
"""meta-train's line for a signal before it writes."""
_closers: list[Callable[[], object]] = []
"""Process-wide, as signal dispositions are: what the handler closes before exiting."""


def exit_code(signum: int) -> int:
    """The shell's code for a program ended by `signum`: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum


def forget_interrupt() -> None:
    """Let the exit code stand after a Ctrl-C that was handled (call before exiting).

    CPython notes a KeyboardInterrupt that ends code compiled from a string (`exec` of source,
    as dataclasses and namedtuples do while a module imports), even once it is caught, and under
    `python -m` it then ends the process by SIGINT at exit instead of with the code given. Code
    run from a string that ends normally clears the note.
    """
    exec("pass")


def close_on_exit(close: Callable[[], object]) -> None:
    """Have a signal that ends the program at once call `close()` first."""
    _closers.append(close)


def exit_at_once(program: str, message: str) -> None:
    """From now on a signal prints `<program>: error: <message>` and exits straight away."""
    line = f"{program}: error: {message}\n".encode()
    exiting: list[int] = []

    def _exit(signum: int, frame: object) -> None:
        if not exiting:  # a second signal while closing: exit without waiting for it
            exiting.append(signum)
            os.write(2, line)
            for close in reversed(_closers):
                with contextlib.suppress(BaseException):
                    close()
        os._exit(exit_code(exiting[0]))

    for sig in HELD:
        signal.signal(sig, _exit)


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
