"""meta-train as users run it: one-line errors, nothing written, sweeps that do not collide.

The refusals run in-process through the command line's entry function (tests/commandline.py);
a process is started where the process is what is tested: the modules it imported, its
piped output, its signals, a multirun's jobs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from commandline import run_main
from processes import signal_within, wait_until

from meta.process.faults import FAULT_ENV
from meta.run.names import SAFE

TINY = ["experiment=tiny", "logger=quiet"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("meta.foo=1", "Key 'foo' not in 'MetaConfig'"),
        ("meta.steps=abc", "could not be converted to Integer"),
        ("meta.steps=0", "meta.steps must be > 0"),
        ("meta.tasks=[{name:FindTarget,weight:0}]", "weight must be"),
        ("meta.tasks=[{name:Jump,weight:1}]", "unknown task 'Jump'"),
        ("meta.outer_lr=1.5", "meta.outer_lr must be in (0, 1]"),
        ("resume=true", "does not exist"),
        ("initialize_from=ghost", "has no weights"),
        ("meta.tasks=[{name:FindTarget,weight:inf}]", "weight must be a finite number"),
        ("meta.tasks=[{name:FindTarget,params:{motor_rotation:[90,10]}}]", "is reversed"),
        ("meta.tasks=[{name:FindTarget,params:{agent_speed:-1}}]", "agent_speed=-1 is outside"),
        ("meta.tasks=[{name:FindTarget,params:{motor_rotation:[1,2,3]}}]", "got 3 values"),
        ("meta.tasks=[{name:FindTarget,params:{motor_rotation:left}}]", "expected a number"),
        ("meta.tasks=[{name:FindTarget,params:{motor_rotation:1e9}}]", "is outside [-180, 180]"),
        ("ppo.max_steps=256", "ppo.max_steps (256) is below ppo.buffer_size (512)"),
        ("ppo.ratio=per_action", "ppo.ratio: unknown value 'per_action'"),
        ("network.normalizer_epsilon=0", "needs ppo.normalizer_prior >= 1"),
        ("torch_matmul_precision=bf16", "torch_matmul_precision=bf16: must be one of highest"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, override: str, message: str
) -> None:
    done = run_main("meta-train", override, *TINY, "results_dir=results", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("meta-train: error: ") and message in done.stderr
    assert list(tmp_path.iterdir()) == []


REFUSED_BEFORE_TORCH = [
    ("train_main", "meta.outer_lr=1.5"),
    ("eval_main", "eval.budgets=[-1]"),
    ("eval_main", "torch_matmul_precision=low"),
]


@pytest.mark.integration
def test_a_bad_value_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    """Config values fail in a moment: torch, Ray and the builds are never loaded for them.

    One fresh interpreter (what it imported is what is tested) runs each refusal in turn.
    """
    code = "import sys\nimport meta.cli\n"
    for main, override in REFUSED_BEFORE_TORCH:
        code += (
            f"sys.argv[1:] = {[override, 'run_id=r']!r}\n"
            f"try:\n    meta.cli.{main}()\nexcept SystemExit as stop:\n"
            "    print(stop.code, 'torch' in sys.modules, flush=True)\n"
            "    print('--', file=sys.stderr, flush=True)\n"
        )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split("\n")[:-1] == ["2 False"] * 3, done.stdout + done.stderr
    lines = done.stderr.split("--\n")[:-1]
    assert len(lines) == 3 and all(line.count("\n") == 1 for line in lines), done.stderr
    assert all("must be" in line for line in lines), done.stderr


def test_existing_run_is_refused_without_changes(tmp_path: Path) -> None:
    """Neither resume nor force: one line, exit code 2, and not a byte of the run changed."""
    first = run_main("meta-train", *TINY, "meta.steps=1", "run_id=r", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "results" / "r"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    done = run_main("meta-train", *TINY, "meta.steps=1", "run_id=r", cwd=tmp_path)
    assert done.returncode == 2 and "already exists" in done.stderr
    assert done.stderr.strip().count("\n") == 0
    assert before == {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def test_piped_output_is_plain_lines_without_a_bar(tmp_path: Path) -> None:
    """Standard output and error are not terminals (as in a pipe): plain lines, no bar."""
    done = run_main(
        "meta-train",
        "experiment=tiny",
        "meta.steps=3",
        "run_id=plain",
        "environment_parameters=arena_curriculum",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "━" not in done.stdout
    lines = done.stdout.splitlines()
    summaries = [line for line in lines if line.startswith("[INFO] Meta-step: ")]
    assert [line.split(".")[0] for line in summaries] == [
        f"[INFO] Meta-step: {k}" for k in range(3)
    ]
    # the CSV's names; a tiny meta-step may end no episode, and then says so (never `nan`)
    assert all("Env steps: " in line and "nan" not in line for line in summaries)
    assert all("mean_reward: " in line or "no episode ended" in line for line in summaries)
    assert any(line.startswith("[INFO] Parameter arena_size moved to lesson 1") for line in lines)
    assert all(line.startswith("[") for line in lines[:-1]), lines
    assert lines[-1].startswith("meta-train: done. Results in ")


@pytest.mark.heavy  # four runs of a meta-step, in-process (Hydra's basic launcher)
def test_multirun_jobs_get_distinct_run_ids(tmp_path: Path) -> None:
    done = run_main(
        "meta-train",
        "--multirun",
        "seed=0,1",
        "meta.outer_lr=0.1,1.0",
        *TINY,
        "meta.steps=1",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    runs = sorted(
        p.name
        for p in (tmp_path / "results").iterdir()
        if p.is_dir() and not p.name.startswith(".")
    )
    assert len(runs) == 4 and all(SAFE.fullmatch(r) for r in runs), runs
    assert "reptile-experiment_tiny-meta.outer_lr_0.1-meta.steps_1-seed_0" in runs
    assert all((tmp_path / "results" / r / "Brain.pt").is_file() for r in runs)


@pytest.mark.slow
@pytest.mark.integration
def test_ctrl_c_leaves_the_last_completed_meta_step_and_says_how_to_resume(
    tmp_path: Path,
) -> None:
    args = [sys.executable, "-m", "meta", *TINY, "meta.steps=200", "run_id=stop"]
    # sent once meta-step 0 is committed; the process waits at meta-step 2 for it
    env = {**os.environ, FAULT_ENV: "after_writers@2:SIGSTOP"}
    proc = subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    checkpoint = tmp_path / "results" / "stop" / "Brain" / "checkpoint.pt"
    signal_within(proc, signal.SIGINT, 0.0, wait_until(checkpoint.exists, proc))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    done = int(re.search(r"holds meta-steps 0\.\.(\d+)", err)[1]) + 1  # type: ignore[index]
    command = shlex.split(err.split("Resume with: ")[1])
    assert command[:3] == ["meta-train", "run_id=stop", "resume=true"], command
    # as printed, with one change the README allows: two more meta-steps instead of 200
    resumed = run_main("meta-train", *command[1:], f"meta.steps={done + 2}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    history = json.loads(
        (tmp_path / "results/stop/run_logs/configuration_history.json").read_text()
    )
    assert history == [
        {
            "meta_step": done,
            "time": history[0]["time"],
            "changes": {"meta.steps": {"from": 200, "to": done + 2}},
        }
    ]
