"""meta-eval's bar: every phase listed from the start, each with its count and time left."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import pytest
from rich.console import Console
from tinyconfig import TINY_EVAL

from meta.config import Config
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.trainer import train

PHASES = (
    "joint pretraining",
    "selection (train)",
    "choice of procedures",
    "adaptation (test)",
    "statistics, plots",
)
LINE = re.compile(r" (?P<done>\d+)/(?P<total>\d+)\s+(?P<unit>\S+) ")
LEFT = re.compile(r"left (\d+:\d\d:\d\d|-:--:--)$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def frames(text: str) -> list[list[str]]:
    """The bar as drawn each time: its lines, one per phase, control sequences left out."""
    lines = [line.rstrip() for line in ANSI.sub("\n", text).splitlines()]
    lines = [line for line in lines if line.startswith(PHASES)]
    return [lines[i : i + len(PHASES)] for i in range(0, len(lines), len(PHASES))]


@pytest.mark.heavy
def test_the_bar_covers_every_phase_with_its_time_left_in_80_columns(
    tiny_config: Callable[..., Config],
) -> None:
    train(tiny_config("meta.steps=2"), "tiny")
    cfg = tiny_config("run_id=tiny", *TINY_EVAL, "eval.splits=[test,train]")
    screen = io.StringIO()
    console = Console(file=screen, width=80, force_terminal=True, color_system=None)
    evaluate(plan_eval(cfg, "tiny"), progress=True, console=console)
    drawn = frames(screen.getvalue())
    assert drawn and all(len(frame) == len(PHASES) for frame in drawn)
    for frame in drawn:  # every phase on every frame, in order, each within 80 columns
        labels = [line[: len(label)] for line, label in zip(frame, PHASES, strict=True)]
        assert labels == list(PHASES)
        assert all(len(line) <= 80 and LEFT.search(line) for line in frame), frame
    counts = [[LINE.search(line) for line in frame] for frame in drawn]
    first, last = counts[0], counts[-1]
    assert [m["done"] for m in first if m] == ["0"] * len(PHASES)  # nothing done yet
    assert all(m and m["done"] == m["total"] for m in last)  # every phase ran to its end
    assert [m["unit"] for m in last if m] == ["meta-steps", "jobs", "step", "jobs", "steps"]
    assert last[0] and last[0]["total"] == "2"  # the joint baseline's meta-steps
    assert last[1] and last[3] and last[1]["total"] == last[3]["total"] == "12"
    # while adaptation runs, the phases before it are complete and its time left is estimated
    running = [
        frame
        for frame, match in zip(drawn, counts, strict=True)
        if match[3] and 1 < int(match[3]["done"]) < int(match[3]["total"])
    ]
    assert running
    for frame in running:
        assert LEFT.search(frame[3])[1] != "-:--:--"  # type: ignore[index]
        assert all(m and m["done"] == m["total"] for m in counts[drawn.index(frame)][:3])
