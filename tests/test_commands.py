"""Every command meta-train prints works when pasted into bash, whatever the run id holds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from meta.run.names import hydra_value

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

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
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=ENV, capture_output=True, text=True)


def _printed(text: str, label: str) -> str:
    found = re.search(rf"{label}: (.+?)(?:\. \w+ it with: |$)", text.strip())
    assert found, text
    return found[1]


@pytest.mark.parametrize(
    "overrides",
    [
        ["meta.tasks=[{name: FindTarget, weight: 1.0}, {name: CarryObject, weight: 2.0}]"],
        ["logger.wandb_project='a b=c,d'", "meta.outer_lr=0.5"],
        ["run_id='a b,c=d [x] \"q\"'"],
    ],
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


def test_a_run_named_by_the_earlier_rule_resumes_from_the_same_overrides(tmp_path: Path) -> None:
    legacy = "reptile_experiment=tiny,meta.steps=2"
    args = ["experiment=tiny", "meta.steps=2", "logger=quiet", "results_dir=rd"]
    named = f"run_id={hydra_value(legacy)}"
    code, _, err = _meta_train(tmp_path, *args, named, fault="after_status@0:SIGINT")
    assert code == 130, err
    code, _, err = _meta_train(tmp_path, *args, "resume=true")
    assert code == 0, err
    assert [p.name for p in (tmp_path / "rd").iterdir() if not p.name.startswith(".")] == [legacy]
