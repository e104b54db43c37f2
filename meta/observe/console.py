"""Where meta-train talks to people: one rich Console for log records and the progress bar.

On a terminal, records go through rich's `RichHandler` on the same Console as the bar, so rich
prints them above the bar instead of over it. Elsewhere (a pipe, a file) there is no bar and
records are plain `[LEVEL] message` lines, without control codes. Everything goes to standard
output, as ML-Agents' trainer logs; errors that end the program stay on standard error.
"""

from __future__ import annotations

import logging
import sys

from rich.console import Console
from rich.logging import RichHandler

PLAIN_FORMAT = "[%(levelname)s] %(message)s"
HANDLER_NAME = "meta-train console"


def run_console() -> Console:
    """The Console of a meta-train process: standard output, a terminal or not."""
    return Console(file=sys.stdout)


def log_to(console: Console, level: int = logging.INFO) -> logging.Handler:
    """Send the process's log records to `console` (replacing a handler this installed before)."""
    handler: logging.Handler
    if console.is_terminal:
        handler = RichHandler(
            console=console, show_time=False, show_path=False, markup=False, rich_tracebacks=False
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(console.file)
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    handler.set_name(HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
