"""meta-train and meta-eval in this process, through the command line's entry functions.

For what the command line says and refuses (one line on stderr, exit code 2, nothing
written): the same functions the console scripts call (`meta.cli.train_main`, `eval_main`),
without starting an interpreter and importing torch again for each line read. A process is
started only where the process is what is tested (tests/processes.py, tests/faults/).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import runpy
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from unittest import mock

from meta import cli, errors
from meta.process.faults import FAULT_ENV
from meta.process.signals import HELD

MAINS: dict[str, Callable[[], None]] = {"meta-train": cli.train_main, "meta-eval": cli.eval_main}


@dataclass(frozen=True)
class Done:
    """What a command left: its exit code and its two streams, as `subprocess.run` keeps them."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _as_a_program(argv: list[str], cwd: Path, columns: int | None) -> Iterator[None]:
    """sys.argv, the working directory, the signal handlers, the root logger's handlers and
    the environment as they are in the program, and as they were afterwards."""
    handlers = {sig: signal.getsignal(sig) for sig in HELD}
    root = logging.getLogger()
    logged = (list(root.handlers), root.level)
    environ = dict(os.environ)
    argv_before = sys.argv
    try:
        sys.argv = argv
        os.environ.pop(FAULT_ENV, None)
        os.environ.pop("FORCE_COLOR", None)
        os.environ.pop("TTY_COMPATIBLE", None)
        os.environ["WANDB_MODE"] = "offline"
        if columns is not None:
            os.environ["COLUMNS"] = str(columns)
        with contextlib.chdir(cwd):
            yield
    finally:
        sys.argv = argv_before
        os.environ.clear()
        os.environ.update(environ)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        root.handlers[:], root.level = logged
        errors.VERBOSE = False


def run_main(program: str, *args: str, cwd: Path, columns: int | None = None) -> Done:
    """`<program> <args>` (meta-train or meta-eval) run in `cwd` in this process, as its
    console script runs it: its exit code, what it printed on stdout and on stderr."""
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with (
        _as_a_program([program, *args], cwd, columns),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            MAINS[program]()
        except SystemExit as exit:
            code = exit.code
    if code is not None and not isinstance(code, int):  # as meta.launch ends the program
        err.write(f"{code}\n")
        code = 1
    return Done(code or 0, out.getvalue(), err.getvalue())


class _Ended(BaseException):
    """os._exit, caught: the program ended there without tearing its modules down."""


def run_module(module: str, *args: str, cwd: Path) -> tuple[Done, int]:
    """`python -m <module> <args>` run in `cwd` in this process, as runpy runs it for `-m`: its
    exit code and two streams, and how many times it ran the exit callbacks.

    The console scripts end with `os._exit` after running the exit callbacks (meta.launch):
    here `os._exit` is caught, and the callbacks, which would be this process's, are counted
    instead of run.
    """
    out, err = io.StringIO(), io.StringIO()
    ended: list[int] = []
    callbacks: list[None] = []

    def end(code: int) -> NoReturn:
        ended.append(code)
        raise _Ended

    with (
        _as_a_program([module, *args], cwd, None),
        mock.patch("os._exit", end),
        mock.patch("atexit._run_exitfuncs", lambda: callbacks.append(None)),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        contextlib.suppress(_Ended),
    ):
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert len(ended) == 1, f"python -m {module} returned without ending the process"
    return Done(ended[0], out.getvalue(), err.getvalue()), len(callbacks)
