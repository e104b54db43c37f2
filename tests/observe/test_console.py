"""The run's console: log records above the bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from io import StringIO

import pytest
from rich.console import Console

from meta.observe.console import log_to
from meta.observe.progress import Progress

TOKEN = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])|\r|\n|[^\x1b\r\n]+")
log = logging.getLogger("meta.test_console")


def screen(stream: str, width: int = 80) -> list[str]:
    """What an 80-column terminal shows after `stream`: enough of one for rich's live display."""
    lines, row, col = [""], 0, 0
    for token in TOKEN.finditer(stream):
        text, code = token.group(0), token.group(2)
        if text == "\r":
            col = 0
        elif text == "\n":
            row, col = row + 1, 0
        elif code == "A":
            row = max(0, row - int(token.group(1) or 1))
        elif code == "K":
            lines[row] = "" if token.group(1) == "2" else lines[row][:col]
        elif code is None:
            for char in text:
                if col == width:  # the terminal wraps where the next character would not fit
                    row, col = row + 1, 0
                lines += [""] * (row + 1 - len(lines))
                line = lines[row].ljust(col)
                lines[row] = line[:col] + char + line[col + 1 :]
                col += 1
        else:
            assert code in "mhl", f"unexpected control sequence {text!r}"
        lines += [""] * (row + 1 - len(lines))
    return [line.rstrip() for line in lines if line.strip()]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:], root.level = handlers, level


def row(k: int) -> dict[str, object]:
    return {"meta_step": k, "task": "FindTarget", "mean_reward": 0.5, "success_rate": 1.0}


def run_steps(console: Console, steps: int) -> None:
    """What meta-train does: log records (a lesson change, summaries) while the bar runs."""
    with Progress(steps, 0, console) as bar:
        for k in range(steps):
            if k == 3:
                log.warning("Parameter arena_size moved to lesson 1 after meta-step %d", k)
            log.info("Meta-step: %d. Mean Reward: 0.5.", k)
            bar.finished([row(k)])


@pytest.mark.usefixtures("restore_logging")
def test_on_a_terminal_records_print_above_the_bar_never_on_it() -> None:
    console = Console(width=80, force_terminal=True, file=StringIO())
    log_to(console)
    run_steps(console, 12)
    shown = screen(console.file.getvalue())  # type: ignore[attr-defined]
    *records, bar = shown
    assert bar.startswith("meta-step 11 FindTarget  reward  0.500 success 1.00 ")
    assert bar.endswith("100% 0:00:00")
    assert all("━" not in line and "meta-step 1" not in line for line in records), records
    summaries = [line.split()[2] for line in records if "Meta-step:" in line]
    assert summaries == [f"{k}." for k in range(12)]
    (warning,) = [line for line in records if "WARNING" in line]
    assert "moved to lesson 1" in warning
    assert all(len(line) <= 80 for line in shown)


def test_ctrl_c_echoed_after_the_bar_leaves_one_bar() -> None:
    console = Console(width=80, force_terminal=True, file=StringIO())
    with pytest.raises(KeyboardInterrupt), Progress(12, 0, console) as bar:
        bar.finished([row(0)])
        console.file.write("^C")  # the terminal's echo, where the cursor is
        raise KeyboardInterrupt
    shown = screen(console.file.getvalue())  # type: ignore[attr-defined]
    assert len(shown) == 1 and shown[0].startswith("meta-step  0 FindTarget"), shown


@pytest.mark.usefixtures("restore_logging")
def test_off_a_terminal_records_are_plain_lines_and_there_is_no_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    console = Console(file=StringIO())
    log_to(console)
    run_steps(console, 4)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b" not in out and "━" not in out
    lines = out.splitlines()
    assert lines[0] == "[INFO] Meta-step: 0. Mean Reward: 0.5."
    assert "[WARNING] Parameter arena_size moved to lesson 1 after meta-step 3" in lines
    assert len(lines) == 5


@pytest.mark.usefixtures("restore_logging")
def test_installing_twice_replaces_the_handler() -> None:
    console = Console(file=StringIO())
    first = log_to(console)
    second = log_to(console)
    assert second in logging.getLogger().handlers and first not in logging.getLogger().handlers
