"""meta-eval's console table puts every start on one env-step axis."""

from __future__ import annotations

from meta.evaluation.plot import table
from meta.evaluation.statistics import Cell


def cell(method: str, budget: int, buffer: int, success: float) -> Cell:
    """One pooled cell of FindTarget's test split."""
    return Cell(
        method, "FindTarget", "test", budget, budget * buffer, 8,
        0.0, 0.0, 0.0, success, success, success, adaptation=f"sgd lr=0.1 buffer={buffer}",
    )  # fmt: skip


def test_starts_with_other_update_sizes_are_rowed_by_env_steps_not_by_budget() -> None:
    cells = [cell("reptile", b, 512, 0.25 * b) for b in (0, 1, 4)]
    cells += [cell("scratch", b, 2048, 0.125 * b) for b in (0, 1)]
    lines = table(cells).splitlines()
    rows = {int(line.split()[0]): line for line in lines[2:5]}
    assert lines[1].split()[:2] == ["env", "steps"]
    assert sorted(rows) == [0, 512, 2048]
    assert "0.250" in rows[512] and rows[512].rstrip().endswith("-")
    assert rows[2048].split()[1] == "1.000" and "0.125" in rows[2048]
