"""meta-bench, the command: without the [bench] extra, and `--quick` end to end against its JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

import envs
from meta.bench import cli as bench
from meta.bench import sb3 as bench_sb3
from meta.bench import scaling as bench_scaling
from meta.bench.markup import BEGIN, END
from meta.evaluation.episodes import Act
from meta.process.compute import torch_threads

WITHOUT = """
import sys
for module in sys.argv[1].split(","):
    sys.modules[module] = None  # import fails as if the package were not installed
from meta.bench.cli import main
sys.argv[0] = "meta-bench"
main(sys.argv[2:])
"""


def meta_bench_without(modules: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """meta-bench in a fresh interpreter where `modules` (comma-separated) cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("modules", "package"),
    [("stable_baselines3", "stable-baselines3"), ("stable_baselines3,gymnasium", "gymnasium")],
)
def test_without_the_bench_extra_one_line_names_the_package_and_the_install(
    tmp_path: Path, modules: str, package: str
) -> None:
    done = meta_bench_without(modules, tmp_path, "--quick", "--out", "bench.json")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"meta-bench: error: {package} is not installed; meta-bench needs the bench extra: "
        "pip install -e '.[bench]'"
    ]
    assert list(tmp_path.iterdir()) == []  # failed before any work
    if package == "gymnasium":  # neither is needed to parse the command line
        usage = meta_bench_without(modules, tmp_path, "--help")
        assert usage.returncode == 0 and usage.stdout.startswith("usage: meta-bench")


def test_readme_writes_the_manual_page_by_default() -> None:
    assert bench.parse(["--readme"]).readme == "docs/reference/benchmarks.md"
    assert bench.parse(["--readme", "other.md"]).readme == "other.md"
    assert bench.parse([]).readme is None
    page = Path(__file__).parents[2] / "docs" / "reference" / "benchmarks.md"
    assert page.read_text().count(BEGIN) == 1  # the page meta-bench --readme rewrites


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "No such file or directory"),
        ("# Performance, no markers\n", f"it needs one {BEGIN} line followed by one {END} line"),
    ],
)
def test_a_page_without_markers_is_refused_in_one_line_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, reason: str
) -> None:
    page, out = tmp_path / "page.md", tmp_path / "bench.json"
    if content is not None:
        page.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--quick", "--out", str(out), "--readme", str(page)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"meta-bench: error: --readme {page}: {reason}\n"
    assert not out.exists() and (content is None or page.read_text() == content)


# --- --quick end to end ------------------------------------------------------------------------

Table = list[dict[str, str]]


def markdown_tables(text: str) -> dict[str, Table]:
    """Each `### title` section's table, as rows keyed by header."""
    tables = {}
    for section in text.split("\n### ")[1:]:
        title, *lines = section.splitlines()
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if "|" in line]
        header, _, *body = rows
        tables[title] = [dict(zip(header, row, strict=True)) for row in body]
    return tables


def text_table(printed: str, title: str) -> list[list[str]]:
    """The plain-text table under `title` in meta-bench's output, cells split on 2+ spaces."""
    lines = printed.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


def shows(cell: str, value: float) -> bool:
    """Whether `cell` ("37,720", "1.58x", "15%", "0.749") is `value` at the precision shown."""
    text, scale = cell.replace(",", "").rstrip("x"), 1.0
    if text.endswith("%"):
        text, scale = text[:-1], 0.01
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) * scale - value) <= 0.5 * 10.0**-decimals * scale * (1 + 1e-9)


def first_episode_success(act: Act, settings: bench_sb3.Settings) -> float:
    """Share of the evaluation areas whose first episode ends by success (not at max_step)."""
    env = envs.make(settings.task, num_areas=settings.eval_episodes, seed=settings.eval_seed)
    env.reset()
    decision, _ = env.get_steps(envs.BEHAVIOR_NAME)
    won: dict[int, bool] = {}
    while len(won) < settings.eval_episodes:
        action = np.clip(act(decision.obs[0]), -1, 1).astype(np.float32)
        env.set_actions(envs.BEHAVIOR_NAME, ActionTuple(continuous=action))
        env.step()
        decision, terminal = env.get_steps(envs.BEHAVIOR_NAME)
        for agent, interrupted in zip(terminal.agent_id, terminal.interrupted, strict=True):
            won.setdefault(int(agent), not bool(interrupted))
    env.close()
    return sum(won.values()) / len(won)


STEPS = 20_000
"""The test's trainings: two buffers of 160 steps of 64 areas."""


@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Act, bench_sb3.Settings, float]]:
    """Every (policy, settings, reported success) meta-bench evaluates, in order."""
    seen: list[tuple[Act, bench_sb3.Settings, float]] = []
    original = bench_sb3.success_rate

    def recorded(act: Act, settings: bench_sb3.Settings) -> float:
        success = original(act, settings)
        seen.append((act, settings, success))
        return success

    monkeypatch.setattr(bench_sb3, "success_rate", recorded)
    return seen


@pytest.mark.integration  # the protocol part launches the builds
@pytest.mark.timeout(420)  # a minute of it is the scaling tables
@pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*")  # StrictVersion
def test_quick_bench_reports_what_it_measured(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    evaluated: list[tuple[Act, bench_sb3.Settings, float]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, md, page = tmp_path / "bench.json", tmp_path / "performance.md", tmp_path / "page.md"
    page.write_text(f"# Performance\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    # One shape per scaling table keeps the test short; meta-bench runs them all.
    monkeypatch.setattr(bench_scaling, "AREAS", (16,))
    monkeypatch.setattr(bench_scaling, "HIDDEN_UNITS", (64,))
    monkeypatch.setattr(bench_scaling, "META_BATCH_SIZES", (1, 2))
    monkeypatch.setattr(bench_scaling, "STACKS", (1, 2, 4))  # --quick leaves out the last
    monkeypatch.setattr(bench_scaling, "STACK_HIDDEN_UNITS", (64,))
    # trainings of two buffers, not --quick's 100k steps: what is reported is what was measured
    flags = ["--quick", "--steps", str(STEPS), "--out", str(out), "--markdown", str(md)]
    bench.main([*flags, "--readme", str(page)])
    report: dict[str, Any] = json.loads(out.read_text())
    settings = report["settings"]
    assert (settings["budget"], settings["n_steps"], settings["threads"]) == (STEPS, 160, [1])
    (row,) = report["training"]
    for side in ("ours", "sb3"):  # 2 whole buffers of 160 steps x 64 areas, the first >= STEPS
        assert row[side]["agent_steps"] == 2 * 160 * 64
    # The policies the row reports (the timed trainings, ours then SB3's), re-evaluated here.
    timed = [(act, s, success) for act, s, success in evaluated if s.budget == STEPS]
    assert [success for *_, success in timed] == [row["ours"]["success"], row["sb3"]["success"]]
    with torch_threads(1):  # as the bench evaluated them: the same actions to the last bit
        for act, s, success in timed:
            assert first_episode_success(act, s) == success
    assert report["unity"]["available"] is True, report["unity"].get("reason")
    assert report["outer"]["meta_steps"] == 3
    assert {(e["task"], e["areas"]) for e in report["env"]} == {
        (task, areas) for task in envs.FAMILIES for areas in (1, 64, 1024)
    }

    text = md.read_text()
    assert text.startswith("## Figures of the last run") and "meta-bench --quick" in text
    machine = report["machine"]
    assert f"{machine['cpu']} ({machine['cpu_kind']})," in text  # the kind on the machine line
    assert page.read_text() == f"# Performance\n\n{BEGIN}\n{text.strip()}\n{END}\n\nafter\n"
    scaled = report["scaling"]
    assert [r["areas"] for r in scaled["areas"]] == [16]
    assert [r["hidden_units"] for r in scaled["hidden_units"]] == [64]
    assert [(r["meta_batch_size"], r["compiled"]) for r in scaled["meta_batch_size"]] == [
        (1, False),
        (2, False),
        (2, True),  # runtime.compile where trainings stack
    ]
    assert [(r["trainings"], r["compiled"]) for r in scaled["stacks"]] == [
        (1, False),
        (2, False),
        (2, True),
    ]
    tables = markdown_tables(text)
    printed = capsys.readouterr().out
    assert "meta-bench: wrote" in printed
    for title, rows in tables.items():  # the printed tables are the markdown ones
        cells = [[c for c in r.values() if c] for r in rows]
        assert text_table(printed, title)[1:] == cells, title
    check_tables_against_json(tables, report)


def check_tables_against_json(tables: dict[str, Table], report: dict[str, Any]) -> None:
    """Every figure in the report's tables is the JSON's, at the precision shown."""
    train = tables["Inner PPO vs Stable-Baselines3, same settings, per torch thread count"]
    for shown, row in zip(train, report["training"], strict=True):
        assert int(shown["threads"]) == row["threads"]
        assert shows(shown["ours steps/s"], row["ours"]["rate"])
        assert shows(shown["SB3 steps/s"], row["sb3"]["rate"])
        assert shows(shown["ratio"], row["ratio"])
        assert shows(shown["ours success"], row["ours"]["success"])
        assert shows(shown["SB3 success"], row["sb3"]["success"])
    ours, sb3, ratio = tables["Each at its best thread count"]
    best = report["best"]
    for shown, side in ((ours, best["ours"]), (sb3, best["sb3"])):
        assert int(shown["threads"]) == side["threads"] and shows(shown["steps/s"], side["rate"])
        assert shows(shown["success"], side["success"])
    assert shows(ratio["steps/s"], best["ratio"])
    inner = tables["One default inner training (PPOConfig defaults, 20,480 agent-steps)"]
    for shown, measured in zip(inner, report["default_inner"], strict=True):
        assert int(shown["threads"]) == measured["threads"]
        assert shows(shown["agent-steps/s"], measured["rate"])
        assert shows(shown["seconds"], measured["seconds"])
    phases = tables["Our phases alone (best buffer of 3)"]
    for shown, measured in zip(phases, report["phases"], strict=True):
        assert shown["torch threads"] == measured["mode"]
        assert shows(shown["collection steps/s"], measured["collect"])
        assert shows(shown["update steps/s"], measured["update"])
    flop = report["limit"]["flop"]
    collect, update, total = (r["FLOP"] for r in tables["Floating-point work"])
    assert shows(collect, flop["collect"]) and shows(update, flop["update"])
    assert shows(total, flop["total"]) and flop["total"] == 698_880
    (limit,) = tables["Against the GEMM limit"]
    per, achieved = report["limit"]["threads"]["1"], report["limit"]["achieved"]["1"]
    assert shows(limit["GEMM GFLOP/s at batch 64"], per["gflops_collect_batch"])
    assert shows(limit["GEMM GFLOP/s at batch 1024"], per["gflops_update_batch"])
    assert shows(limit["GEMM-only steps/s"], achieved["limit_rate"])
    assert shows(limit["ours steps/s"], report["training"][0]["ours"]["rate"])
    assert shows(limit["share of limit"], achieved["fraction"])
    env = tables["Native task throughput (BaseEnv API, random actions)"]
    for shown, measured in zip(env, report["env"], strict=True):
        assert (shown["task"], int(shown["areas"])) == (measured["task"], measured["areas"])
        assert shows(shown["agent-steps/s"], measured["rate"])
    unity = tables["Protocol backend (envs.bench_unity, FindTarget)"]
    for shown, measured in zip(unity, report["unity"]["rows"], strict=True):
        assert (shown["path"], int(shown["areas"])) == (measured["path"], measured["areas"])
        assert shows(shown["agent-steps/s"], measured["rate"])
        if "without_build" in measured:  # what the trainer side and the transport allow
            assert measured["without_build"] > measured["rate"]
            assert shows(shown["with a build taking no time"], measured["without_build"])
            assert shows(shown["build's own us/step"], measured["build_own_us"])
    outer = tables[f"Outer-loop overhead (mean of {report['outer']['meta_steps']} meta-steps)"]
    parts = {r["part"]: r["ms per meta-step"] for r in outer}
    for name, seconds in report["outer"]["parts_s"].items():
        assert shows(parts[name], seconds * 1e3), name
    assert shows(parts["total outside the inner training"], report["outer"]["overhead_s"] * 1e3)
    check_scaling_against_json(tables, report["scaling"])


def check_scaling_against_json(tables: dict[str, Table], scaled: dict[str, Any]) -> None:
    """The scaling tables show the JSON's rates, limits and shares."""
    for key, column in (("areas", "env.num_areas"), ("hidden_units", "network.hidden_units")):
        prefix = f"Scaling: one inner training against {column}"
        (title,) = [t for t in tables if t.startswith(prefix)]
        for shown, row in zip(tables[title], scaled[key], strict=True):
            assert int(shown[column]) == row[key]
            assert shows(shown["agent-steps/s"], row["rate"])
            assert shows(shown["GEMM-only agent-steps/s"], row["limit_rate"])
            assert shows(shown["share of limit"], row["fraction"])
            assert row["fraction"] == pytest.approx(row["rate"] / row["limit_rate"])
    (title,) = [t for t in tables if t.startswith("Scaling: default meta-steps")]
    by = {(r["meta_batch_size"], r["compiled"]): r for r in scaled["meta_batch_size"]}
    sizes = sorted({size for size, _ in by})
    for shown, size in zip(tables[title], sizes, strict=True):
        row = by[size, False]
        assert int(shown["meta.meta_batch_size"]) == size
        assert shows(shown["meta-steps/min"], row["per_minute"])
        compiled = by.get((size, True))
        shown_compiled = shown["compiled"]
        assert shows(shown_compiled, compiled["per_minute"]) if compiled else shown_compiled == "-"
        assert shows(shown["GEMM-only meta-steps/min"], row["limit_per_minute"])
        assert shows(shown["share"], row["fraction"])
        assert row["fraction"] == pytest.approx(row["per_minute"] / row["limit_per_minute"])
    (title,) = [t for t in tables if t.startswith("Stacked: k default inner trainings")]
    stacks = {(r["trainings"], r["hidden_units"], r["compiled"]): r for r in scaled["stacks"]}
    eager = [r for r in scaled["stacks"] if not r["compiled"]]
    for shown, row in zip(tables[title], eager, strict=True):
        assert (int(shown["trainings"]), int(shown["hidden units"])) == (
            row["trainings"],
            row["hidden_units"],
        )
        assert shows(shown["agent-steps/s"], row["rate"])
        assert shows(shown["GEMM-only agent-steps/s"], row["limit_rate"])
        assert shows(shown["share"], row["fraction"])
        compiled = stacks.get((row["trainings"], row["hidden_units"], True))
        if compiled is None:
            assert shown["compiled"] == shown["compiled share"] == "-"
        else:
            assert shows(shown["compiled"], compiled["rate"])
            assert shows(shown["compiled share"], compiled["fraction"])
