"""meta-eval stopped while it pretrains the joint baselines: one line, and a rerun goes on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from commandline import run_main
from tinyconfig import TINY, TINY_EVAL, TINY_MEASURE

from meta.process.faults import FAULT_ENV

pytestmark = pytest.mark.integration  # meta-eval runs as a process
SHARED = pytest.mark.xdist_group("eval_interrupt")
"""One worker for the tests of the trained runs: the runs and the references are made once."""

EVAL = ["run_id=s-seed_0", "eval.run_ids=[s-seed_0,s-seed_1]", *TINY_MEASURE]
"""meta-eval of two Reptile runs; the pretrainings are what is stopped, the starts not adapted."""
JOINT_EVAL = ["run_id=j-seed_0", "eval.run_ids=[j-seed_0,j-seed_1]", *TINY_EVAL]
"""meta-eval of two meta=joint runs: no joint baseline to pretrain, it adapts at once."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with two seeds' runs of Reptile (`s`) and of meta=joint (`j`)."""
    where = tmp_path_factory.mktemp("trained")
    for run, extra in (("s", []), ("j", ["meta=joint"])):
        args = [*TINY, *extra, "meta.steps=3", "seeds=[0,1]", f"run_id={run}"]
        done = run_main("meta-train", *args, cwd=where)  # no process needed to train them
        assert done.returncode == 0, done.stderr
    return where / "results"


@pytest.fixture
def runs(trained: Path, tmp_path: Path) -> Path:
    """This test's copy of the trained runs, in its own folder (the working directory)."""
    shutil.copytree(trained, tmp_path / "results")
    return tmp_path


def _command(program: str, args: list[str], fault: str = "") -> tuple[list[str], dict[str, str]]:
    """`meta-train` or `meta-eval` as a command line and its environment (a fault if given)."""
    code = f"import sys; from meta.cli import {program}; sys.argv[0] = 'x'; {program}()"
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({"WANDB_MODE": "offline", **({FAULT_ENV: fault} if fault else {})})
    return [sys.executable, "-c", code, *args], env


def _run(
    program: str, args: list[str], cwd: Path, fault: str = ""
) -> subprocess.CompletedProcess[str]:
    """`meta-train` or `meta-eval` as a process, with a fault point (a real signal) if given."""
    command, env = _command(program, args, fault)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _joints(cwd: Path, run: str = "s") -> list[Path]:
    return [cwd / "results" / f"{run}-seed_{s}" / "eval" / "joint" for s in (0, 1)]


Pretrained = Callable[[list[str]], list[bytes]]


@pytest.fixture(scope="module")
def uninterrupted(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> Pretrained:
    """The joint baselines' weights of a meta-eval run in one go, by its arguments.

    Sequential and in worker processes they are the same (eval.workers is left out of the key,
    so a pretraining resumed in a worker is held to the sequential one); each is run once.
    """
    made: dict[tuple[str, ...], list[bytes]] = {}

    def weights(args: list[str]) -> list[bytes]:
        key = tuple(a for a in args if not a.startswith("eval.workers="))
        if key not in made:
            cwd = tmp_path_factory.mktemp("whole")
            shutil.copytree(trained, cwd / "results")
            whole = run_main("meta-eval", *key, "eval.out_dir=whole", cwd=cwd)
            assert whole.returncode == 0, whole.stderr
            made[key] = [(j / "Brain.pt").read_bytes() for j in _joints(cwd)]
        return made[key]

    return weights


def _goes_on_bitwise(args: list[str], cwd: Path, uninterrupted: Pretrained) -> None:
    """Run again, the pretrainings end as when trained from nothing in one go."""
    again = run_main("meta-eval", *args, "eval.out_dir=cut", cwd=cwd)
    assert again.returncode == 0, again.stderr
    resumed = [(j / "Brain.pt").read_bytes() for j in _joints(cwd)]
    assert resumed == uninterrupted(args)


@SHARED
@pytest.mark.parametrize(
    "fault",
    ["inner_training@0:SIGINT", "before_commit@1:SIGINT"],
    ids=["nothing-committed", "resumable"],
)
def test_an_interrupted_joint_pretraining_says_so_in_one_line_and_goes_on(
    fault: str, runs: Path, uninterrupted: Pretrained
) -> None:
    tmp_path = runs
    args = EVAL
    # SIGINT in a joint baseline's first inner training (nothing to resume: it starts over) or
    # as it commits its second meta-step (it resumes); the fault reaches every run's loop
    stopped = _run("eval_main", [*args, "eval.out_dir=cut"], tmp_path, fault)
    assert stopped.returncode == 130, stopped.stderr
    line = stopped.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("meta-eval: error: joint pretraining"), line
    assert "run this meta-eval again to go on from there" in line and "Traceback" not in line
    assert "force=true" not in line and "Resume with" not in line  # meta-train's, not meta-eval's
    assert not any((j / "Brain.pt").exists() for j in _joints(tmp_path))
    _goes_on_bitwise(args, tmp_path, uninterrupted)


@SHARED
@pytest.mark.parametrize(
    ("fault", "code", "reason", "held"),
    [
        ("before_commit@1:SIGINT", 130, "interrupted", "0..1"),  # signals held by the commit
        ("disk_full@1", 1, "stopped: no space left", "0..0"),
        # SIGKILL: the worker itself dies, as the kernel's out-of-memory killer would end it
        ("inner_training@1", 1, "stopped: a worker process ended abruptly", "0..0"),
    ],
    ids=["interrupted", "disk-full", "worker-killed"],
)
def test_a_joint_pretraining_stopped_in_a_worker_says_so_and_goes_on(
    fault: str, code: int, reason: str, held: str, runs: Path, uninterrupted: Pretrained
) -> None:
    # eval.workers=2: each pretraining stops in its worker process, whose Stopped must reach
    # meta-eval whole (it used to fail to unpickle there, and meta-eval hung)
    tmp_path = runs
    args = [*EVAL, "eval.workers=2"]
    stopped = _run("eval_main", [*args, "eval.out_dir=cut"], tmp_path, fault)
    assert stopped.returncode == code, stopped.stderr
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith(f"meta-eval: error: joint pretraining {reason}"), stopped.stderr
    # the first stop stops the other worker's pretraining too; the line says where each stands
    assert all(str(Path("results", f"s-seed_{s}", "eval", "joint")) in line for s in (0, 1))
    assert f" meta-steps {held};" in line, line
    assert line.endswith("; run this meta-eval again to go on from there"), line
    assert "Traceback" not in stopped.stderr
    if "SIGINT" not in fault and "disk_full" not in fault:  # the others resume as in-process
        _goes_on_bitwise(args, tmp_path, uninterrupted)  # a worker killed mid-meta-step


def test_meta_eval_interrupted_alone_stops_its_workers_pretrainings(tmp_path: Path) -> None:
    # `kill -INT` of meta-eval alone (not its process group): its workers get it from meta-eval
    # and stop their pretrainings, rather than meta-eval waiting for them to finish
    steps = 60  # seconds of pretraining: the signal comes well before its end
    train = [*TINY, f"meta.steps={steps}", "seeds=[0,1]", "run_id=L"]
    trained = run_main("meta-train", *train, cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    args = ["run_id=L-seed_0", "eval.run_ids=[L-seed_0,L-seed_1]", *TINY_EVAL, "eval.workers=2"]
    command, env = _command("eval_main", [*args, "eval.out_dir=cut"])
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    logs = [j / "meta_steps.csv" for j in _joints(tmp_path, "L")]
    while not all(log.is_file() and len(log.read_text().splitlines()) > 2 for log in logs):
        assert process.poll() is None, process.communicate()[1]
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    line = stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, line
    assert line.startswith("meta-eval: error: joint pretraining interrupted; "), line
    assert line.endswith("; run this meta-eval again to go on from there"), line
    for log in logs:  # stopped before the end, each after what it had committed
        assert 2 <= len(log.read_text().splitlines()) - 1 < steps


def _workers(pid: int) -> list[int]:
    """The worker processes of a process pool meta-eval (`pid`) has spawned."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    lines = {c: Path(f"/proc/{c}/cmdline").read_bytes() for c in children}
    return [int(c) for c, line in lines.items() if b"spawn_main(" in line]


@SHARED
@pytest.mark.parametrize(
    ("target", "sent", "code", "line"),
    [
        # SIGKILL of one worker, as the kernel's out-of-memory killer would end it
        (
            "worker",
            signal.SIGKILL,
            1,
            "a worker process ended abruptly (killed, or out of memory?) before writing "
            "results; run it again to start over",
        ),
        # Ctrl-C at a terminal: every process of the group, the workers still starting
        (
            "group",
            signal.SIGINT,
            130,
            "interrupted before writing results; run it again to start over",
        ),
    ],
    ids=["worker-killed", "ctrl-c"],
)
def test_meta_eval_stopped_as_its_workers_start_says_so_in_one_line(
    target: str, sent: signal.Signals, code: int, line: str, runs: Path
) -> None:
    # eval.workers=2 on meta=joint runs: the workers, as soon as they exist (importing torch
    # for seconds), are to adapt; the signal comes then
    tmp_path = runs
    args = [*JOINT_EVAL, "eval.workers=2", "eval.seeds=8", "eval.budgets=[0,1,2,4,8]"]
    command, env = _command("eval_main", [*args, "eval.out_dir=cut"])
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    while not (workers := _workers(process.pid)):
        assert process.poll() is None, process.communicate()[1]
        time.sleep(0.05)
    if target == "worker":
        os.kill(workers[0], sent)
    else:
        os.killpg(process.pid, sent)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == code, stderr
    assert stderr.strip() == f"meta-eval: error: {line}", stderr  # no worker's traceback
    assert not (tmp_path / "cut").exists()
