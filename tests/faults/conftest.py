"""Fixtures of the fault-injection tests (helpers in faultkit.py and ../processes.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from commandline import run_main
from faultkit import RESUME, RESUME_END, RUN, RUN_END, STARTUP_END, Reference, done_line, run, start
from once import MadeOnce
from processes import life, started, wait_until


def _reference(cwd: Path) -> None:
    code, err = run(cwd, *RUN, "run_id=ref")
    assert code == 0, err


@pytest.fixture(scope="session")
def reference(made_once: MadeOnce) -> Reference:
    """The uninterrupted run, once per session (for both workers)."""
    return Reference(made_once("faults-reference", _reference) / "results" / "ref")


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A working directory for one trial, emptied afterwards (trials leave large runs)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def _finished(cwd: Path) -> None:
    done = run_main("meta-train", *RUN, "run_id=done", cwd=cwd)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def finished(made_once: MadeOnce) -> Path:
    """A working directory holding one completed run, results/done (copied per test), once
    per session for both workers.

    Trained in-process: the tests that read it test what later commands do with it.
    """
    return made_once("faults-finished", _finished)


def _copy_of(finished: Path, to: Path) -> Path:
    shutil.copytree(finished, to, symlinks=True, dirs_exist_ok=True)  # as cp -a, in-process
    return to


@pytest.fixture
def copy(finished: Path, tmp_path: Path) -> Path:
    """A private copy of the finished run's working directory."""
    return _copy_of(finished, tmp_path)


@pytest.fixture(scope="session")
def startup_life(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds of RUN's start-up on this machine: from its handlers to its first training."""
    proc = start(tmp_path_factory.mktemp("startup"), *RUN, "run_id=early", fault=STARTUP_END)
    return life(proc, started(proc))


@pytest.fixture(scope="session")
def resume_life(finished: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds of a resume's start-up (RESUME on the finished run) to its first training."""
    cwd = _copy_of(finished, tmp_path_factory.mktemp("resume"))
    proc = start(cwd, *RESUME, fault=RESUME_END)
    return life(proc, started(proc))


@pytest.fixture(scope="session")
def run_life(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds of RUN on this machine from its first status file to its last point."""
    cwd = tmp_path_factory.mktemp("life")
    proc = start(cwd, *RUN, "run_id=r", fault=RUN_END)
    status = cwd / "results" / "r" / "run_logs" / "training_status.json"
    return life(proc, wait_until(status.exists, proc))


@pytest.fixture(scope="session")
def exit_life(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds from RUN's `meta-train: done` line to its exit on this machine."""
    proc = start(tmp_path_factory.mktemp("exit"), *RUN, "run_id=exiting")
    return life(proc, done_line(proc))
