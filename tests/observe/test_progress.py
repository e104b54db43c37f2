"""The meta-step bar: what it shows for the meta-step just finished, in 80 columns."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

import pytest
from rich.console import Console

from meta.observe.progress import Progress, describe, task_label

nan = float("nan")
ESCAPE = re.compile(r"\x1b\[[?0-9;]*[A-Za-z]")


def row(k: int, task: str = "CarryObject", reward: float = -0.0657, success: float = 0.27) -> dict:
    return {"meta_step": k, "task": task, "mean_reward": reward, "success_rate": success}


def final_frame(total: int, done: int, steps: list[list[dict[str, Any]]]) -> str:
    """The bar's last line as an 80-column terminal shows it after the run."""
    console = Console(width=80, force_terminal=True, file=StringIO())
    with Progress(total, done, console) as bar:
        for rows in steps:
            bar.finished(rows)
    text = ESCAPE.sub("", console.file.getvalue())  # type: ignore[attr-defined]
    return text.replace("\r", "\n").rstrip("\n").split("\n")[-1]


def test_the_bar_shows_the_meta_step_just_finished_as_meta_steps_csv_numbers_it() -> None:
    line = final_frame(12, 0, [[row(k)] for k in range(12)])
    assert line.startswith("meta-step 11 CarryObject reward -0.066 success 0.27 ")
    assert "━" in line and line.endswith("100% 0:00:00")
    assert len(line) <= 78  # room for a ^C echoed after it


@pytest.mark.parametrize(
    ("total", "rows", "text"),
    [
        (10_000, [row(9_998, reward=-12.3456)], "meta-step 9998 CarryObject reward -12.346"),
        (12, [row(3, "FindTarget", nan, nan)], "meta-step  3 FindTarget  no episode ended "),
        (12, [row(3, "CarryObject+FindTarget")], "meta-step  3 2 families  reward"),
        (12, [row(3), row(3, "FindTarget", 1.0, 1.0)], "3 2 tasks     reward  0.467 success 0.64"),
    ],
)
def test_every_kind_of_meta_step_fits_80_columns(
    total: int, rows: list[dict[str, Any]], text: str
) -> None:
    line = final_frame(total, rows[0]["meta_step"], [rows])
    assert text in line, line
    assert len(line) <= 78 and "━" in line


def test_a_resumed_run_starts_at_its_next_meta_step() -> None:
    console = Console(width=80, force_terminal=True, file=StringIO())
    with Progress(12, 5, console):
        pass
    text = ESCAPE.sub("", console.file.getvalue())  # type: ignore[attr-defined]
    assert "meta-step  5 running" in text and "42%" in text


def test_no_bar_off_a_terminal_or_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    for console, enabled in (
        (Console(width=80, file=StringIO()), True),
        (Console(width=80, force_terminal=True, file=StringIO()), False),
    ):
        with Progress(3, 0, console, enabled) as bar:
            bar.finished([row(0)])
        assert not bar.enabled
        assert console.file.getvalue() == ""  # type: ignore[attr-defined]


def test_labels() -> None:
    assert task_label([row(0, "FindTarget")]) == "FindTarget"
    assert task_label([row(0, "SomeVeryLongFamily")]) == "SomeVeryLo…"
    assert describe([row(7)], 2) == "meta-step  7 CarryObject reward -0.066 success 0.27"
    # no episode ended in the inner training: said so, in the width of the numbers
    quiet = describe([row(7, reward=nan, success=nan)], 2)
    assert quiet.rstrip() == "meta-step  7 CarryObject no episode ended"
    assert "nan" not in quiet and len(quiet) == len(describe([row(7)], 2))
