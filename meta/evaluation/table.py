"""meta-eval's console tables: IQM [CI] per env steps and start, steps to the target, procedures.

They are rich tables, so that a terminal of 80 columns (or any other) wraps a cell between its
words, never inside one: an interval is written `0.250 [0.125,0.375]`, which wraps as the IQM
above its interval when the columns are too narrow for both on one line.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from meta.evaluation.plot import METRIC_LABELS, methods, panels
from meta.evaluation.statistics import Cell

WIDTH = 80
"""The width `table` renders at: a terminal's that nobody widened."""


def grid(*titles: str, right: Sequence[int] = ()) -> Table:
    """Plain columns (those at `right` right-justified): a rule under the header, no frame.

    Two spaces between columns; a cell wraps between its words, and only a word wider than its
    column alone is folded.
    """
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, title in enumerate(titles):
        table.add_column(title, justify="right" if i in right else "left", overflow="fold")
    return table


def _ci(cell: Cell | None, metric: str) -> str:
    if cell is None:
        return "-"
    iqm, low, high = (getattr(cell, f"{metric}_{k}") for k in ("iqm", "low", "high"))
    return f"{iqm:.3f} [{low:.3f},{high:.3f}]"


def _steps(value: float) -> str:
    return "not reached" if math.isnan(value) else str(int(value))


def curves(cells: Sequence[Cell], confidence: float = 0.95) -> list[RenderableType]:
    """Per family, split and metric: a title line and a table of env steps x start."""
    names, out = methods(cells), list[RenderableType]()
    for family, split in panels(cells):
        panel = [c for c in cells if (c.family, c.split) == (family, split)]
        for metric in ("success", "reward"):
            out.append(
                Text(
                    f"{family} / {split} tasks: {METRIC_LABELS[metric]}, "
                    f"IQM [{confidence:.0%} CI] over {max(c.n for c in panel)} task-seeds"
                )
            )
            table = grid("env\nsteps", *names, right=(0,))
            # One axis for every start: procedures with other update sizes sit on other rows.
            for steps in sorted({c.env_steps for c in panel}):
                row = {c.method: c for c in panel if c.env_steps == steps}
                table.add_row(str(steps), *(_ci(row.get(m), metric) for m in names))
            out += [table, Text("")]
    return out


def reached(cells: Sequence[Cell], target: float = 0.8) -> list[RenderableType]:
    """Env steps until the success IQM reaches `target`, per family, split and start."""
    names = methods(cells)
    table = grid("family", "split", *names)
    for family, split in panels(cells):
        steps = {c.method: c.steps_to_80 for c in cells if (c.family, c.split) == (family, split)}
        table.add_row(family, split, *(_steps(steps.get(m, math.nan)) for m in names))
    title = f"Adaptation env steps until the success IQM reaches {target:g} (steps_to_80.csv)"
    return [Text(title), table, Text("")]


def procedures(cells: Sequence[Cell]) -> list[RenderableType]:
    """The adaptation procedure (and joint pretraining) each start was selected with."""
    table = grid("family", "start", "procedure")
    for family, method, adaptation, pretraining in dict.fromkeys(
        (c.family, c.method, c.adaptation, c.pretraining) for c in cells
    ):
        pre = f" (pretrained: {pretraining})" if pretraining else ""
        table.add_row(family, method, adaptation + pre)
    return [Text("Adaptation procedures (selected on the selection split)"), table]


def tables(cells: Sequence[Cell], target: float = 0.8, confidence: float = 0.95) -> Group:
    """Everything meta-eval prints at its end, as one renderable."""
    return Group(*curves(cells, confidence), *reached(cells, target), *procedures(cells))


def table(
    cells: Sequence[Cell], target: float = 0.8, confidence: float = 0.95, width: int = WIDTH
) -> str:
    """The tables as plain text `width` columns wide."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, highlight=False)
    console.print(tables(cells, target, confidence))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
