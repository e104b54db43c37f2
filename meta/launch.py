"""The console scripts: Ctrl-C and SIGTERM are handled from their first instruction on.

Until a program starts writing, a signal ends it at once with one line and exit code 130
(SIGINT) or 143 (SIGTERM): no traceback from the middle of an import, Hydra's composition, Ray's
start-up or a resume's loading, and no C++ exception that would abort the process. Only the
standard library is imported before the handlers are in place.
"""

from meta.run.signals import exit_at_once

BEFORE_START = "interrupted before the run started; nothing was written"


def train() -> None:
    """`meta-train`."""
    exit_at_once("meta-train", BEFORE_START)
    from meta.cli import train_main

    train_main()


def evaluate() -> None:
    """`meta-eval`."""
    exit_at_once("meta-eval", "interrupted before writing results; nothing was written")
    from meta.cli import eval_main

    eval_main()
