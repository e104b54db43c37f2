"""Every command meta-train prints works when pasted into bash, whatever the run id holds, and
the README's tour runs as printed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from commandline import run_main
from test_notebook import images_of, kernel, text_of
from tinyconfig import TINY_EVAL, compose_config

from meta.cli import evaluate_command
from meta.run.names import hydra_value

ROOT = Path(__file__).resolve().parent.parent
TINY = ["experiment=tiny", "logger=quiet", "meta.steps=2", "results_dir=rd"]
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "META_HARNESS_FAULT")},
    "WANDB_MODE": "offline",
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
}


def _meta_train(cwd: Path, *args: str, fault: str | None = None) -> tuple[int, str, str]:
    env = {**ENV, **({"META_HARNESS_FAULT": fault} if fault else {})}
    done = subprocess.run(
        [sys.executable, "-m", "meta", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    return done.returncode, done.stdout, done.stderr


def _bash(cwd: Path, line: str) -> subprocess.CompletedProcess[str]:
    env = {**ENV, **{k: os.environ[k] for k in ("JUPYTER_PATH",) if k in os.environ}}
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True)


def _printed(text: str, label: str) -> str:
    found = re.search(rf"{label}: (.+?)(?:\. \w+ it with: |$)", text.strip())
    assert found, text
    return found[1]


@pytest.mark.integration  # commands pasted into bash
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "overrides",
    [
        # a list of mappings, a string of spaces, = and a comma, a float: quoted in one line
        [
            "meta.tasks=[{name: FindTarget, weight: 1.0}, {name: CarryObject, weight: 2.0}]",
            "logger.wandb_project='a b=c,d'",
            "meta.outer_lr=0.5",
        ],
        ["run_id='a b,c=d [x] \"q\"'"],
    ],
    ids=["derived", "given"],
)
def test_the_printed_resume_meta_eval_and_tensorboard_commands_paste_into_bash(
    overrides: list[str], tmp_path: Path
) -> None:
    code, _, err = _meta_train(tmp_path, *TINY, *overrides, fault="after_status@0:SIGINT")
    assert code == 130 and "holds meta-steps 0..0" in err, err
    resumed = _bash(tmp_path, _printed(err, "Resume with"))
    assert resumed.returncode == 0, resumed.stderr
    (run_dir,) = (tmp_path / "rd").iterdir()
    assert len((run_dir / "meta_steps.csv").read_text().splitlines()) > 2  # both meta-steps

    evaluate = _bash(tmp_path, _printed(resumed.stdout, "Evaluate it with") + " --cfg job")
    assert evaluate.returncode == 0, evaluate.stderr
    assert f"run_id: {run_dir.name}" in evaluate.stdout or f"run_id: '{run_dir.name}'" in (
        evaluate.stdout
    ), evaluate.stdout
    watch = shlex.split(_printed(resumed.stdout, "Watch it with"))
    assert watch[:2] == ["tensorboard", "--logdir"] and Path(tmp_path, watch[2]) == run_dir


def test_the_closing_line_offers_the_quick_evaluation_to_a_tour_sized_run_only() -> None:
    tour = compose_config(["experiment=tour"])
    assert evaluate_command(tour, "tour", "results") == "meta-eval run_id=tour eval=quick"
    default = compose_config([])
    assert evaluate_command(default, "r", "elsewhere") == "meta-eval run_id=r results_dir=elsewhere"


@pytest.mark.heavy  # two trainings
def test_a_run_named_by_the_earlier_rule_resumes_from_the_same_overrides(tmp_path: Path) -> None:
    """In-process (tests/commandline.py): which directory a resume finds is not the process's."""
    legacy = "reptile_experiment=tiny,meta.steps=2"
    args = ["experiment=tiny", "logger=quiet", "results_dir=rd"]
    named = f"run_id={hydra_value(legacy)}"
    first = run_main("meta-train", *args, "meta.steps=1", named, cwd=tmp_path)  # meta-step 0
    assert first.returncode == 0, first.stderr
    resumed = run_main("meta-train", *args, "meta.steps=2", "resume=true", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert [p.name for p in (tmp_path / "rd").iterdir() if not p.name.startswith(".")] == [legacy]
    table = (tmp_path / "rd" / legacy / "meta_steps.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in table[1:]] == ["0", "1"]  # continued, not redone


def _tour() -> tuple[list[str], list[str]]:
    """The README tour's commands (tensorboard left out) and the lines it shows printed."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## A two-minute tour") :]
    section = section[: section.index("\n## ")]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", section, re.S | re.M)
    lines = [
        re.sub(r"\s+#.*$", "", line).strip()
        for language, block in blocks
        if language == "bash"
        for line in block.splitlines()
    ]
    commands = [c for c in lines if "run_id=tour" in c or c.startswith("jupyter ")]
    (printed,) = [block for language, block in blocks if not language]
    return commands, printed.splitlines()


def _shape(line: str) -> str:
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", line)


@pytest.mark.integration  # commands pasted into bash
@pytest.mark.timeout(600)
@pytest.mark.slow  # four programs, a run and a quick meta-eval of it: about a minute
def test_the_readme_tour_runs_as_pasted_and_shows_learning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands, printed = _tour()
    assert [c.split()[0] for c in commands] == ["meta-train", "meta-train", "meta-eval", "jupyter"]
    clone = tmp_path / "clone"  # the commands' working directory, as a fresh clone's root
    shutil.copytree(ROOT / "notebooks", clone / "notebooks")
    kernel(tmp_path, monkeypatch)
    quick = " ".join(TINY_EVAL)  # meta-eval in seconds; the tour's own defaults take minutes
    outputs = []
    for command in commands:
        done = _bash(clone, f"{command} {quick}" if command.startswith("meta-eval") else command)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
        outputs.append(done.stdout)

    shown = {line.split(".")[0]: line for line in outputs[0].splitlines()}
    for line in printed:
        if line != "...":
            assert _shape(shown.get(line.split(".")[0], "")) == _shape(line), line

    steps = pd.read_csv(clone / "results" / "tour" / "meta_steps.csv")
    assert list(steps["meta_step"]) == list(range(40)) and (steps["episodes"] > 0).all()
    first, last = steps.head(10).mean(numeric_only=True), steps.tail(10).mean(numeric_only=True)
    assert first["success_rate"] < 0.3 and last["success_rate"] > first["success_rate"] + 0.5
    assert last["mean_reward"] > first["mean_reward"] + 1.0

    assert sorted(p.name for p in clone.iterdir()) == ["notebooks", "results"]
    import nbformat  # here: its import takes seconds, and every worker collects this file

    notebook = nbformat.read(clone / "results" / "meta_steps.ipynb", as_version=4)
    text = text_of(notebook)
    assert "results/tour: reptile, meta-steps 40 of 40" in text and "measurements" in text
    assert images_of(notebook) == 5  # 4 of the meta-steps (no curriculum) and the adaptation
