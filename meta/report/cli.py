"""`meta-report SWEEP`: a sweep's settings side by side, on the console and beside the sweep."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from meta.report.figure import plot
from meta.report.runs import ReportError, find_runs, read_run
from meta.report.settings import Setting, group
from meta.report.table import Options, Row, console_tables, legend, markdown, summarise, to_csv

PROGRAM = "meta-report"
NEVER_POOLED = ("meta.algorithm", "meta.tasks", "meta.split")
"""What makes runs incomparable: reported as separate settings, with a line saying so."""
OUTPUTS = ("report.csv", "report.md", "report.png")


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Summarise a sweep: one row per setting (seeds pooled), report.csv, "
        "report.md and report.png beside the sweep.",
    )
    p.add_argument(
        "sweep",
        nargs="+",
        help="a folder of runs (a results_dir, a sweep's), run directories, or run ids",
    )
    p.add_argument("--results-dir", default="results", help="where run ids live (results)")
    p.add_argument("--last", type=int, default=10, help="meta-steps averaged per run (10)")
    p.add_argument(
        "--budgets",
        type=_budgets,
        default=(),
        help="held-out budgets in PPO updates, e.g. 2,4,8 (default: meta-eval's largest)",
    )
    p.add_argument("--out", help="folder for the report (default: the sweep's folder)")
    p.add_argument("--no-figure", action="store_true", help="skip report.png")
    return p


def _budgets(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: budgets must be >= 0")
    return values


def out_folder(targets: Sequence[str], runs: Sequence[Path], given: str | None) -> Path:
    """Beside the sweep: the folder named, else the folder the runs share; never a run."""
    if given:
        return Path(given)
    if len(targets) == 1 and not any(Path(targets[0]).resolve() == r.resolve() for r in runs):
        named = Path(targets[0])
        if named.is_dir():
            return named
    parents = {r.parent.resolve() for r in runs}
    return runs[0].parent if len(parents) == 1 else Path(".")


def notes(settings: Sequence[Setting], differing: Sequence[str], runs: int) -> list[str]:
    """One line on what was pooled, and one for settings that are never pooled."""
    keys = ", ".join(differing) or "nothing but their seeds"
    lines = [f"{runs} runs in {len(settings)} settings, differing in {keys} (seeds pooled)"]
    apart = [k for k in differing if _under(k, NEVER_POOLED)]
    if apart:
        lines.append(
            f"runs of different {', '.join(sorted(set(apart)))} are separate settings, not pooled"
        )
    running = sum(r.running for s in settings for r in s.runs)
    if running:
        lines.append(f"{running} runs still hold their lock: read up to their last commit")
    return lines


def _under(key: str, sections: Sequence[str]) -> bool:
    return any(key == s or key.startswith(s + ".") for s in sections)


def report(args: argparse.Namespace) -> Path:
    """Read, summarise, print and write; ReportError before anything is written."""
    if args.last < 1:
        raise ReportError(f"--last must be >= 1, got {args.last}")
    paths = find_runs(args.sweep, args.results_dir)
    runs = [read_run(p) for p in paths]
    settings, differing = group(runs)
    options = Options(args.last, tuple(args.budgets))
    rows = summarise(settings, options)
    out = out_folder(args.sweep, paths, args.out)
    if any(out.resolve() == p.resolve() for p in paths):
        raise ReportError(f"{out} is a run directory: the report goes beside runs, not in one")
    lines = notes(settings, differing, len(runs))
    console = Console()
    if not console.is_terminal:
        console.width = 1000  # a pipe or a file: one line per row, however wide
    for line in lines:
        console.print(f"{PROGRAM}: {line}", markup=False, highlight=False)
    console.print(*console_tables(rows, args.last, console.width))
    for line in legend(rows, args.last):
        console.print(line, markup=False, highlight=False)
    write(out, rows, differing, lines, args)
    return out


def write(
    out: Path,
    rows: Sequence[Row],
    keys: Sequence[str],
    lines: Sequence[str],
    args: argparse.Namespace,
) -> None:
    """report.csv, report.md and report.png in `out`, each atomically."""
    from meta.process.atomic import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / OUTPUTS[0], to_csv(rows, keys))
    figure = "" if args.no_figure else f"\n![meta-steps per setting]({OUTPUTS[2]})\n"
    text = "# meta-report\n\n" + "".join(f"- {line}\n" for line in lines)
    key = "".join(f"\n- {line}" for line in legend(rows, args.last))
    atomic_write_text(out / OUTPUTS[1], f"{text}\n{markdown(rows, args.last)}{key}\n{figure}")
    if not args.no_figure:
        plot([r.setting for r in rows], out / OUTPUTS[2])


def main(argv: Sequence[str] | None = None) -> None:
    """`meta-report SWEEP [...]`."""
    from meta.errors import fail

    args = parser().parse_args(argv)
    try:
        out = report(args)
    except ReportError as error:
        fail(PROGRAM, error)
    written = ", ".join(o for o in OUTPUTS if not (args.no_figure and o.endswith(".png")))
    print(f"{PROGRAM}: wrote {written} in {out}", file=sys.stdout)
