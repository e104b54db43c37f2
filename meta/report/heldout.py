"""Held-out results of a setting, from what meta-eval wrote: success at budgets, steps-to-80.

meta-eval writes `adaptation.csv` (one row per measurement) into `<run>/eval/` for one run and
into `<results_dir>/eval_<id>+<id>...` for several evaluated together (experiments/study.py:
`<name>_eval` for its runs `<name>_seed<k>`). A setting's held-out
result is its own method's measurements on the `test` split, families pooled, summarised with
meta-eval's statistics (IQM, hierarchical bootstrap over meta-training seeds): from the folder
that evaluated exactly the setting's runs together, else from every run's own folder.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from meta.config.metric import HELD_OUT
from meta.evaluation.objective import pooled_families
from meta.evaluation.statistics import Measurement, summarise
from meta.evaluation.steps import steps_to_target
from meta.report.runs import ReportError, Run

EVAL_DIR = "eval"
ADAPTATION_FILE = "adaptation.csv"


@dataclass(frozen=True)
class HeldOut:
    """A setting's held-out success per budget, and steps-to-80 (NaN: not reached)."""

    success: dict[int, tuple[float, float, float]]
    """budget -> (IQM, low, high)."""
    steps_to_80: tuple[float, float, float]
    measurements: int


def eval_folders(runs: Sequence[Run]) -> list[Path]:
    """Where meta-eval evaluated these runs: one folder for all of them, or one per run."""
    ids = {r.path.name for r in runs}
    together = [f for f in _beside(runs[0].path) if _covers(f, runs[0].path) == ids]
    if len(runs) > 1 and together:
        return together[:1]
    own = [r.path / EVAL_DIR for r in runs]
    return own if all((f / ADAPTATION_FILE).is_file() for f in own) else []


def evaluated_in(run_dir: Path) -> Path | None:
    """Where meta-eval's results for one run are: its own folder, else one naming it."""
    own = run_dir / EVAL_DIR
    if (own / ADAPTATION_FILE).is_file():
        return own
    return next((f for f in _beside(run_dir) if run_dir.name in _covers(f, run_dir)), None)


def _beside(run_dir: Path) -> list[Path]:
    """Folders beside a run that meta-eval may have written for several runs."""
    parent = run_dir.parent
    if not parent.is_dir():
        return []
    return sorted(f for f in parent.iterdir() if (f / ADAPTATION_FILE).is_file())


def _covers(folder: Path, run_dir: Path) -> set[str]:
    """The runs a folder beside `run_dir` evaluated, as its name says.

    meta-eval names the folder of several runs `eval_<id>+<id>...`; experiments/study.py puts
    the runs `<name>_seed<k>` together in `<name>_eval`.
    """
    prefix = f"{EVAL_DIR}_"
    if folder.name.startswith(prefix):
        return set(folder.name.removeprefix(prefix).split("+"))
    study = re.fullmatch(r"(.+)_seed\d+", run_dir.name)
    if study and folder.name == f"{study.group(1)}_{EVAL_DIR}":
        pattern = re.compile(re.escape(study.group(1)) + r"_seed\d+")
        return {p.name for p in folder.parent.iterdir() if pattern.fullmatch(p.name)}
    return set()


def read_measurements(path: Path) -> list[Measurement]:
    """adaptation.csv as Measurements; a damaged file is a ReportError naming it."""
    kinds = {f.name: f.type for f in fields(Measurement)}
    try:
        with path.open(encoding="utf-8", newline="") as file:
            rows = list(csv.DictReader(file))
    except (OSError, UnicodeDecodeError) as error:
        raise ReportError(f"{path}: unreadable ({error})") from None
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            values = {k: _typed(kinds[k], v) for k, v in row.items() if k in kinds}
            out.append(Measurement(**values))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ReportError(f"{path}: damaged: line {line} is not a measurement") from None
    return out


def _typed(kind: object, text: str | None) -> object:
    if kind in ("int", int):
        return int(text or 0)
    if kind in ("float", float):
        return math.nan if not text else float(text)
    return text or ""


def held_out(
    runs: Sequence[Run], method: str, budgets: Sequence[int] | None, samples: int = 2000
) -> HeldOut | None:
    """The setting's held-out result, or None where meta-eval has not run on its runs."""
    folders = eval_folders(runs)
    seeds = {r.seed for r in runs}
    chosen = [
        m
        for folder in folders
        for m in read_measurements(folder / ADAPTATION_FILE)
        if m.method == method and m.split == HELD_OUT and m.meta_seed in seeds
    ]
    if not chosen:
        return None
    pooled = pooled_families(chosen)
    reach = str(runs[0].config.get("eval.reach", "first"))  # as the runs' objective reads it
    cells = summarise(pooled, samples=samples, reach=reach)
    by_budget = {c.budget: (c.success_iqm, c.success_low, c.success_high) for c in cells}
    wanted = list(budgets) if budgets else [max(by_budget)]
    success = {b: by_budget.get(b, (math.nan, math.nan, math.nan)) for b in wanted}
    (steps,) = steps_to_target(pooled, 0.8, samples=samples, reach=reach)
    return HeldOut(success, (steps.steps_to_80, steps.ci_low, steps.ci_high), len(chosen))
