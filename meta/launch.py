"""The console scripts: Ctrl-C and SIGTERM are handled from their first instruction on.

Until a program starts writing, a signal ends it at once with one line and exit code 130
(SIGINT) or 143 (SIGTERM): no traceback from the middle of an import, Hydra's composition, Ray's
start-up or a resume's loading, and no C++ exception that would abort the process. Only the
standard library is imported before the handlers are in place.

Once the program has returned, it ends without tearing its modules down: CPython restores the
default signal dispositions before that teardown, which takes about a second with torch
loaded, and a signal then would end the process with no line and no exit code of its own.
"""

import atexit
import os
import sys
from collections.abc import Callable

from meta.process.signals import BEFORE_START, exit_at_once


def train() -> None:
    """`meta-train`."""
    exit_at_once("meta-train", BEFORE_START)
    from meta.cli import train_main

    _end_after(train_main)


def evaluate() -> None:
    """`meta-eval`."""
    exit_at_once("meta-eval", "interrupted before writing results; nothing was written")
    from meta.cli import eval_main

    _end_after(eval_main)


def _end_after(main: Callable[[], object]) -> None:
    """Run `main`; then the exit callbacks, flush, and exit with its code (handlers still set)."""
    try:
        main()
        code: object = 0
    except SystemExit as exit:
        code = exit.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
