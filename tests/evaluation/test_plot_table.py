"""meta-eval's console tables: every start on one env-step axis, and 80 columns that wrap
between words, never inside one."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from meta.evaluation.statistics import Cell
from meta.evaluation.table import table

BOX = set("─━│┃┌┐└┘├┤┬┴┼╇╈┡┩┏┓┗┛┳┻╋╸╺")


def cell(method: str, budget: int, buffer: int, success: float, reward: float = 0.0) -> Cell:
    """One pooled cell of FindTarget's test split."""
    return Cell(
        method, "FindTarget", "test", budget, budget * buffer, 8,
        reward, reward - 0.031, reward + 0.027, success, success, success,
        adaptation=f"sgd lr=0.1 buffer={buffer}",
    )  # fmt: skip


def words(text: str) -> Counter[str]:
    """The words of a rendering, rules and frames left out."""
    return Counter(w for w in text.split() if not set(w) <= BOX)


def fits(text: str, width: int) -> None:
    """No line wider than `width`."""
    widest = max(text.splitlines(), key=len)
    assert len(widest) <= width, widest


def test_starts_with_other_update_sizes_are_rowed_by_env_steps_not_by_budget() -> None:
    cells = [cell("reptile", b, 512, 0.25 * b) for b in (0, 1, 4)]
    cells += [cell("scratch", b, 2048, 0.125 * b) for b in (0, 1)]
    lines = table(cells).splitlines()
    assert lines[1].split() == ["env"] and lines[2].split() == ["steps", "reptile", "scratch"]
    rows = {int(line.split()[0]): line for line in lines[4:7]}
    assert sorted(rows) == [0, 512, 2048]
    assert "0.250" in rows[512] and rows[512].rstrip().endswith("-")
    assert rows[2048].split()[1] == "1.000" and "0.125" in rows[2048]


def panels(methods: list[str]) -> list[Cell]:
    """Two families x two splits of `methods`, with negative rewards, long procedures, and a
    start that never reaches the target."""
    out = []
    for family in ("FindTarget", "CarryObject"):
        for split in ("test", "train"):
            for method in methods:
                for budget in (0, 1, 2, 5, 10, 20):
                    out.append(
                        Cell(
                            method, family, split, budget, budget * 20480, 20,
                            -0.923, -0.951, -0.900, 1.0, 0.95, 1.0,
                            steps_to_80=math.nan if method == "scratch" else 20480.0 * budget,
                            adaptation="adam lr=0.0003 buffer=20480",
                            pretraining="adam lr=0.0003 buffer=10240" if method == "joint" else "",
                        )
                    )  # fmt: skip
    return out


@pytest.mark.parametrize(
    "methods", [["reptile", "scratch", "joint"], ["reptile", "fomaml", "scratch", "joint"]]
)
def test_the_tables_fit_80_columns_and_wrap_between_words(methods: list[str]) -> None:
    cells = panels(methods)
    narrow, wide = table(cells, width=80), table(cells, width=400)
    fits(narrow, 80)
    assert words(narrow) == words(wide)  # a word broken in two would count as two others
    assert max(len(line) for line in wide.splitlines()) > 80  # there was something to wrap
    assert narrow.count("task-seeds") == 8  # 2 families x 2 splits x success and reward
    assert "-0.923 [-0.951,-0.900]" in wide and "not reached" in narrow
    if len(methods) == 3:  # three starts' intervals fit side by side on one line
        assert "-0.923 [-0.951,-0.900]  -0.923 [-0.951,-0.900]  -0.923" in narrow
