"""The Results page and the README's results table, from the committed outputs alone.

    python -m experiments.results            # writes docs/results.md and the README's table
    python -m experiments.results --check    # exit 1, naming the first line that differs

Every figure comes from a file under experiments/ (steps_to_80.csv, improvement.csv,
summary.csv, study.json, the comparison's summaries, meta-bench's report); nothing is typed
here but the studies' names, their questions and where each one's history is told.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from experiments.study import load_study

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"
PAGE = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
COMMAND = "python -m experiments.results"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
STARTS = ("reptile", "fomaml", "scratch", "joint")
NAMES = {"reptile": "Reptile", "fomaml": "FOMAML", "scratch": "scratch", "joint": "joint"}
SPLITS = ("test", "train", "validation")
FIGURE = "../experiments/mlagents_ppo/ten_seeds/FindTarget.png"


@dataclass(frozen=True)
class Study:
    """A canonical study: its folder under experiments/, its configuration and its question."""

    folder: str
    config: str
    title: str
    question: str
    history: str
    """The anchor of its entry in docs/log.md."""


STUDIES = (
    Study(
        "hidden_goal_adaptation",
        "hidden_goal_adaptation.yaml",
        "Hidden goal",
        "FindTarget with the goal hidden and drawn per task (the positive control), every split "
        "drawn one task per patch: does the meta-learned start adapt faster?",
        "2026-12-04-one-task-per-patch",
    ),
    Study(
        "hidden_goal_half_horizon",
        "hidden_goal_half_horizon.yaml",
        "Hidden goal, half the horizon",
        "The same study run from nothing, every procedure adapting for 16,384 env steps instead "
        "of 32,768.",
        "2026-12-07-hidden-goal-over-half-the-horizon",
    ),
    Study(
        "hidden_rotation_adaptation",
        "hidden_rotation_adaptation.yaml",
        "Hidden rotation",
        "FindTarget with the move command rotated by a hidden angle drawn per task over the full "
        "circle (the second control family), meta-trained on inner trainings of 16 updates.",
        "2026-12-03-hidden-rotation-meta-trained-for-16-updates",
    ),
    Study(
        "hidden_rotation_half_horizon",
        "hidden_rotation_half_horizon.yaml",
        "Hidden rotation, half the horizon",
        "The same study run from nothing, every procedure adapting for 16,384 env steps.",
        "2026-12-07-hidden-rotation-over-half-the-horizon",
    ),
    Study(
        "default_distribution",
        "default_distribution.yaml",
        "The default distribution (negative control)",
        "Visible targets and motor rotations within ±60°: one reactive policy serves the "
        "training tasks; is there anything left for meta-learning?",
        "2026-12-01-the-default-distribution-under-the-protocol",
    ),
)

# Superseded studies: folder (under experiments/archive/), what it asked, what replaced it, and
# the log entry that tells it.
SUPERSEDED = (
    (
        "hidden_goal",
        "Hidden goals, meta-trained on updates of 2,048",
        "hidden_goal_small",
        "2026-12-01-hidden-goals-under-the-protocol",
    ),
    (
        "hidden_goal_small",
        "The positive control, 5 hand-listed procedures, 3 seeds",
        "the equal-budget search",
        "2026-12-01-the-positive-control-under-the-protocol",
    ),
    (
        "hidden_goal_small_batched",
        "The positive control stacked; a critic reset for joint",
        "the equal-budget search",
        "2026-12-03-the-positive-control-stacked-a-fresh-critic-for-joint",
    ),
    (
        "hidden_goal_small_search",
        "An equal search budget per start, random opening",
        "the search opened with the run's procedure",
        "2026-12-03-an-equal-tuning-budget-hidden_goal_small_search",
    ),
    (
        "hidden_goal_small_search_first",
        "The same search opened with the run's procedure",
        "the sustained reading",
        "2026-12-03-the-search-opened-with-the-runs-procedure",
    ),
    (
        "hidden_goal_small_search_sustained",
        "Steps-to-80 read as a sustained crossing",
        "inner trainings of 16 updates",
        "2026-12-03-a-sustained-crossing-a-searchable-schedule",
    ),
    (
        "hidden_goal_small_inner16",
        "Meta-trained for the longer adaptation, 4 tasks per split",
        "8 tasks per split",
        "2026-12-03-hidden-goal-meta-trained-for-the-longer-adaptation",
    ),
    (
        "hidden_goal_small_inner16_tasks8",
        "The same on 8 tasks per split",
        "one task per patch (Hidden goal)",
        "2026-12-04-eight-tasks-per-split",
    ),
    (
        "hidden_rotation_small_search",
        "Hidden rotation, meta-trained on 8 updates",
        "16 updates (Hidden rotation)",
        "2026-12-03-hidden-rotation-under-the-protocol",
    ),
)


def slug(title: str) -> str:
    """The anchor mkdocs gives a heading (Python-Markdown's toc slugify)."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_title).strip().lower())


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _number(text: str | None) -> float | None:
    if text is None or text.strip() == "":
        return None
    value = float(text)
    return None if math.isnan(value) else value


def _steps(text: str | None) -> str:
    value = _number(text)
    return "not reached" if value is None else f"{value:,.0f}"


def _interval(point: str, low: str, high: str, form: str) -> str:
    if form == "steps":
        return f"{_steps(point)} [{_steps(low) if low else '—'}, {_steps(high)}]"
    if _number(point) is None:
        return "—"
    return f"{float(point):.3f} [{float(low):.3f}, {float(high):.3f}]"


def _steps_cell(row: dict[str, str]) -> str:
    return _interval(row["steps_to_80"], row["ci_low"], row["ci_high"], "steps")


def _probability(row: dict[str, str]) -> str:
    low, high = float(row["ci_low"]), float(row["ci_high"])
    return f"{float(row['probability']):.2f} [{low:.2f}, {high:.2f}]"


def _overrides(config: DictConfig) -> dict[str, str]:
    """The study's meta-eval overrides, key to value (the last given wins)."""
    return dict(str(o).split("=", 1) for o in config.eval if "=" in str(o))


def commit_of(folder: Path) -> str:
    """The last commit that wrote the study's figures, or 'not recorded' outside a checkout.

    Followed across renames, which are not writes (`--diff-filter=AM`): a study folder renamed
    keeps the commit its figures came from."""
    try:
        done = subprocess.run(
            [
                "git",
                "log",
                "-1",
                "--follow",
                "--diff-filter=AM",
                "--format=%h %ad",
                "--date=short",
                "--",
                "steps_to_80.csv",
            ],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "not recorded"
    return done.stdout.strip() or "not recorded"


def _wall(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "not recorded"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


def header(study: Study) -> str:
    """One line: configuration, seeds, tasks, selection, trials, reach, horizon, CPU, commit."""
    folder = EXPERIMENTS / study.folder
    record = (
        json.loads((folder / "study.json").read_text()) if (folder / "study.json").is_file() else {}
    )
    config = load_study(EXPERIMENTS / study.config)
    keys = _overrides(config)
    seeds = record.get("meta_training_seeds", list(config.get("seeds", [0])))
    tasks = keys.get("eval.tasks_per_family", "4")
    if keys.get("eval.stratify") == "true":
        tasks += " (one per patch)"
    horizon = max(int(row["env_steps"]) for row in _rows(folder / "summary.csv"))
    cpu = record.get("cpu")
    if cpu and record.get("cpu_kind"):
        cpu = f"{cpu} ({record['cpu_kind']})"
    trials = record.get("search_trials_per_start")
    procedure = (
        f"{trials} search trials per start"
        + (
            ", the first the run's procedure"
            if record.get("first_trial_is_the_runs_procedure")
            else ""
        )
        if trials
        else "a list of procedures (`eval.adaptation`)"
    )
    parts = [
        f"[`experiments/{study.config}`](../experiments/{study.config})",
        f"meta-training seeds {', '.join(str(s) for s in seeds or [])}",
        f"{tasks} tasks per family and split × {keys.get('eval.seeds', '5')} adaptation seeds",
        f"selected on `{record.get('selection_split', keys.get('eval.selection_split', 'train'))}`",
        procedure,
        f"reach {keys.get('eval.reach', 'first')}",
        f"horizon {horizon:,} env steps",
        f"CPU {cpu or 'not recorded'}",
        f"commit {commit_of(folder)}",
        f"wall time {_wall(record.get('wall_seconds'))}",
    ]
    return "**" + "; ".join(parts[:1]) + "**: " + "; ".join(parts[1:]) + "."


def study_table(study: Study) -> list[str]:
    """Split x start: steps to 80% [CI], AUC [CI], probability of improvement [CI]."""
    folder = EXPERIMENTS / study.folder
    steps = _rows(folder / "steps_to_80.csv")
    improvement = (
        _rows(folder / "improvement.csv") if (folder / "improvement.csv").is_file() else []
    )
    families = list(dict.fromkeys(row["family"] for row in steps))
    lines = [
        "| family | split | start | steps to 80% [95% CI] | success AUC [95% CI] "
        "| P(better than scratch) [95% CI] | P(better than joint) [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for family in families:
        for split in SPLITS:
            for start in STARTS:
                row = next(
                    (
                        r
                        for r in steps
                        if (r["family"], r["split"], r["method"]) == (family, split, start)
                    ),
                    None,
                )
                if row is None:
                    continue
                name = NAMES[start] + (
                    f" (pretrained {row['pretraining']})" if row.get("pretraining") else ""
                )
                auc = _interval(
                    row.get("auc", ""), row.get("auc_low", ""), row.get("auc_high", ""), "auc"
                )
                better = []
                for baseline in ("scratch", "joint"):
                    match = next(
                        (
                            r
                            for r in improvement
                            if (r["family"], r["split"], r["method"], r["baseline"])
                            == (family, split, start, baseline)
                        ),
                        None,
                    )
                    better.append("—" if match is None else _probability(match))
                lines.append(
                    f"| {family} | `{split}` | {name} | "
                    f"{_steps_cell(row)} | {auc} | "
                    f"{better[0]} | {better[1]} |"
                )
    return lines


def study_section(study: Study) -> list[str]:
    folder = f"../experiments/{study.folder}"
    files = sorted(
        p.name for p in (EXPERIMENTS / study.folder).iterdir() if p.suffix in {".csv", ".json"}
    )
    return [
        f"## {study.title}",
        "",
        study.question,
        "",
        header(study) + f" How it came about: [log](log.md#{study.history}).",
        "",
        *study_table(study),
        "",
        f"[![adaptation curves: {study.title}]({folder}/adaptation.png)]({folder}/adaptation.png)",
        "",
        "Outputs: " + ", ".join(f"[`{name}`]({folder}/{name})" for name in files) + ".",
        "",
    ]


def mlagents_section() -> list[str]:
    """The comparison with mlagents-learn: mean reward per 50k steps, and the printed checks."""
    out = [
        "## Against `mlagents-learn`",
        "",
        "`ppo=mlagents` and ML-Agents 1.1.0's `mlagents-learn` trained on the same builds with the "
        "same settings ([fidelity](mlagents-fidelity.md#measured-against-mlagents-learn)), "
        "ten seeds each; and the ablation, one difference of the default at a time taken back "
        "to ML-Agents' behaviour, three seeds each "
        "([its summary](mlagents-fidelity.md#ablation-one-row-back-to-the-defaults-behaviour)).",
        "",
    ]
    for name, title in (("ten_seeds", "Ten seeds"), ("ablation", "The ablation (FindTarget)")):
        folder = EXPERIMENTS / "mlagents_ppo" / name
        rows = _rows(folder / "summary.csv")
        out += [
            f"### {title}",
            "",
            "| task | trainer | seeds | mean reward at 50k [min, max] | at 100k | at 150k "
            "| success at 150k |",
            "|---|---|---|---|---|---|---|",
        ]
        for key in dict.fromkeys((r["task"], r["trainer"], r["seeds"]) for r in rows):
            points = {r["label"]: r for r in rows if (r["task"], r["trainer"], r["seeds"]) == key}
            cells = [
                f"{float(points[s]['reward_mean']):+.2f} [{float(points[s]['reward_min']):+.2f}, "
                f"{float(points[s]['reward_max']):+.2f}]"
                if s in points
                else "—"
                for s in ("50000", "100000", "150000")
            ]
            success = (
                f"{float(points['150000']['success_mean']):.2f}" if "150000" in points else "—"
            )
            out.append(
                f"| {key[0]} | `{key[1]}` | {key[2]} | " + " | ".join(cells) + f" | {success} |"
            )
        printed = folder / ("comparison.txt" if name == "ten_seeds" else "ablation.txt")
        lines = [  # the ablation's printed lines repeat its table; the comparison's add checks
            line
            for line in printed.read_text().splitlines()
            if (name == "ten_seeds" and " against " in line) or "band check" in line
        ]
        out += [
            "",
            f"Printed by `experiments/mlagents_ppo.py` "
            f"([`{printed.name}`](../experiments/mlagents_ppo/{name}/{printed.name}))"
            + (":" if lines else "."),
            "",
        ]
        out += ["```", *lines, "```", ""] if lines else []
        out += [
            f"Outputs: [`summary.csv`](../experiments/mlagents_ppo/{name}/summary.csv), "
            f"[`curves.csv`](../experiments/mlagents_ppo/{name}/curves.csv).",
            "",
        ]
    out += [
        f"[![mean reward against steps, FindTarget]({FIGURE})]({FIGURE})",
        "",
    ]
    return out


def bench_section() -> list[str]:
    """meta-bench's headline: the lines of its committed report that say machine and ratio."""
    report = (EXPERIMENTS / "performance.md").read_text().splitlines()
    keep = [line for line in report if line.startswith(("Machine:", "Ours trains at"))]
    return [
        "## `meta-bench`",
        "",
        "Our inner PPO against Stable-Baselines3's on the same core and settings, and against the "
        "limit the matrix products alone set ([performance](performance.md)). From "
        "`experiments/performance.md`, written by "
        "`meta-bench --readme --markdown experiments/performance.md`:",
        "",
        *_quoted(keep),
        "",
    ]


def _quoted(lines: list[str]) -> list[str]:
    out: list[str] = []
    for index, line in enumerate(lines):
        if index:
            out.append(">")
        out.append(f"> {line}")
    return out


def selfplay_section() -> list[str]:
    """Self-play's ELO per seed, as `experiments/selfplay_seeds.py` printed it."""
    table = EXPERIMENTS / "selfplay" / "elo.md"
    lines = [
        "## Self-play's ELO",
        "",
        "Sumo's default task trained from scratch with the ghost trainer on the learning test's "
        "budget (500,000 learning-team agent-steps, ML-Agents' `self_play` defaults), one seed a "
        "row ([self-play](self-play.md#learning-as-measured)). Printed by "
        "`python experiments/selfplay_seeds.py > experiments/selfplay/elo.md` "
        "(its wall column depends on what else the machine ran):",
        "",
    ]
    if not table.is_file():
        return [*lines[:3], "No output of it is committed, so this page shows no figure of it.", ""]
    return [*lines, *table.read_text().strip().splitlines(), ""]


def fault_section() -> list[str]:
    """The fault suite at full count, as `experiments/fault_trials.py` printed it."""
    table = EXPERIMENTS / "fault_trials" / "table.md"
    return [
        "## The fault trials",
        "",
        "Real processes killed, signalled, raced and given corrupt files, each trial checked "
        "against what the run must do ([reliability](reliability.md#the-fault-suite)). From "
        "`experiments/fault_trials/table.md`:",
        "",
        *table.read_text().strip().splitlines(),
        "",
    ]


def superseded_section() -> list[str]:
    lines = [
        "## Superseded studies",
        "",
        "Their configurations and outputs are kept under `experiments/archive/`; each is "
        "reproduced by the command of its [log](log.md) entry.",
        "",
        "| study | what it asked | replaced by | history |",
        "|---|---|---|---|",
    ]
    for folder, asked, replaced, anchor in SUPERSEDED:
        assert (EXPERIMENTS / "archive" / folder).is_dir(), folder
        lines.append(f"| `archive/{folder}` | {asked} | {replaced} | [log](log.md#{anchor}) |")
    return [*lines, ""]


def render() -> str:
    """The whole Results page."""
    lines = [
        "# Results",
        "",
        f"Generated by `{COMMAND}` from the outputs committed under `experiments/`; "
        "do not edit by hand (the tests regenerate it and fail on any difference).",
        "",
        "Each canonical study compares the meta-learned starts (Reptile, FOMAML) with a random "
        "start (scratch) and the multi-task baseline (joint), every start at its own best "
        "adaptation procedure chosen on training-distribution tasks "
        "([the protocol](evaluating.md)). "
        "Steps to 80%: env steps of adaptation until the success IQM reaches 0.8; AUC: the mean "
        "success over the horizon; P(better than …): rliable's probability of improvement over "
        "the runs' AUCs. How each study came about is in the [log](log.md).",
        "",
    ]
    for study in STUDIES:
        lines += study_section(study)
    lines += mlagents_section() + selfplay_section() + fault_section() + bench_section()
    lines += superseded_section()
    return "\n".join(lines).rstrip() + "\n"


def readme_table() -> str:
    """The README's block: held-out figures of each canonical evaluation study, with intervals."""
    lines = [
        BEGIN,
        "| study | Reptile: steps to 80% on held-out tasks | best baseline | Reptile's AUC | "
        "P(Reptile better than joint) |",
        "|---|---|---|---|---|",
    ]
    for study in STUDIES:
        folder = EXPERIMENTS / study.folder
        steps = [r for r in _rows(folder / "steps_to_80.csv") if r["split"] == "test"]
        improvement = (
            _rows(folder / "improvement.csv") if (folder / "improvement.csv").is_file() else []
        )
        for family in dict.fromkeys(r["family"] for r in steps):
            rows = {r["method"]: r for r in steps if r["family"] == family}
            reptile = rows["reptile"]
            best = min(
                (rows[b] for b in ("scratch", "joint") if b in rows),
                key=lambda r: (
                    _number(r["steps_to_80"]) if _number(r["steps_to_80"]) is not None else math.inf
                ),
            )
            auc = _interval(
                reptile.get("auc", ""),
                reptile.get("auc_low", ""),
                reptile.get("auc_high", ""),
                "auc",
            )
            joint = next(
                (
                    r
                    for r in improvement
                    if (r["family"], r["split"], r["method"], r["baseline"])
                    == (family, "test", "reptile", "joint")
                ),
                None,
            )
            better = "—" if joint is None else (_probability(joint))
            name = study.title + (f", {family}" if study.folder == "default_distribution" else "")
            anchor = slug(study.title)
            lines.append(
                f"| [{name}](docs/results.md#{anchor}) | "
                f"{_steps_cell(reptile)} | "
                f"{best['method']} {_steps_cell(best)} | "
                f"{auc} | {better} |"
            )
    return "\n".join([*lines, END])


def readme_with_table(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + readme_table() + tail


def first_difference(old: str, new: str) -> str:
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False), 1):
        if a != b:
            return f"line {number}: {a!r} should be {b!r}"
    return f"{len(old.splitlines())} lines should be {len(new.splitlines())}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="only say whether the files are current"
    )
    options = parser.parse_args(argv)
    page, readme = render(), readme_with_table(README.read_text())
    if options.check:
        stale = [
            (path, text)
            for path, text in ((PAGE, page), (README, readme))
            if path.read_text() != text
        ]
        for path, text in stale:
            print(
                f"{path.relative_to(ROOT)} disagrees with the outputs, "
                f"{first_difference(path.read_text(), text)}: run {COMMAND}"
            )
        return 1 if stale else 0
    PAGE.write_text(page)
    README.write_text(readme)
    print(f"wrote {PAGE.relative_to(ROOT)} and the results table of {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
