"""An error told in one line: its first line, the causes it did not suppress, and `fail`."""

from __future__ import annotations

import re
import sys
import traceback

from meta.process.signals import forget_interrupt

VERBOSE = False
"""`--verbose` given: `fail` prints the traceback before the line."""
_PASSWORD = re.compile(r"(://[^:/@\s'\"]*:)[^\s'\"]*@")


def _line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def first_line(error: BaseException) -> str:
    """The first line of the error's message, or its type's name when the message is empty."""
    return _line(error) or type(error).__name__


def one_line(error: BaseException) -> str:
    """An error and the causes it did not suppress (`from None`) as one line, each once."""
    text = first_line(error)
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    while cause is not None:
        first = _line(cause)
        if first and first not in text:
            text = f"{text} ({first})"
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return text


def without_passwords(text: str) -> str:
    """`text` with the password of every URL in it (`scheme://user:password@...`) as `***`."""
    return _PASSWORD.sub(r"\1***@", text)


def _hydra_verbose() -> bool:
    """Whether `hydra.verbose` was set for this run."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.initialized() and bool(HydraConfig.get().verbose)


def fail(program: str, error: BaseException | str, code: int = 2) -> None:
    """Print `program: error: ...` on one line and exit non-zero (the traceback too if verbose)."""
    if (VERBOSE or _hydra_verbose()) and sys.exc_info()[0] is not None:
        traceback.print_exc()
    message = error if isinstance(error, str) else one_line(error)
    print(f"{program}: error: {message}", file=sys.stderr)
    forget_interrupt()
    raise SystemExit(code)
