"""A signal that ends the program at once, with one line: the regime before and after writes.

Imports only `os` and `signal`, so that the console scripts install it as their first
instruction (`meta.launch`).
"""

import os
import signal

HELD = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    """The shell's code for a program ended by `signum`: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum


def exit_at_once(program: str, message: str) -> None:
    """From now on a signal prints `<program>: error: <message>` and exits straight away."""
    line = f"{program}: error: {message}\n".encode()

    def _exit(signum: int, frame: object) -> None:
        os.write(2, line)
        os._exit(exit_code(signum))

    for sig in HELD:
        signal.signal(sig, _exit)
