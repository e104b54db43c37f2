"""A signal that ends the program at once, with one line: the regime before and after writes.

Imports only a few standard modules, so that the console scripts install it as their first
instruction (`meta.launch`). What must not outlive the program (a local Ray cluster it started)
registers its `close` with `close_on_exit`; the handler runs it before exiting.
"""

import contextlib
import os
import signal
from collections.abc import Callable

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
