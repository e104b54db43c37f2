"""Fixtures of the fault-injection tests (helpers in faultkit.py)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from faultkit import RUN, Reference, run


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """The uninterrupted run, once per session."""
    cwd = tmp_path_factory.mktemp("reference")
    code, err = run(cwd, *RUN, "run_id=ref")
    assert code == 0, err
    return Reference(cwd / "results" / "ref")


@pytest.fixture
def wait_for() -> Callable[[Callable[[], bool], float], None]:
    """Poll a condition until it holds or the timeout passes (then fail)."""

    def poll(condition: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail("condition not reached in time")
            time.sleep(0.05)

    return poll


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A working directory for one trial, emptied afterwards (trials leave large runs)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="session")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory holding one completed run, results/done (copied per test)."""
    cwd = tmp_path_factory.mktemp("finished")
    code, err = run(cwd, *RUN, "run_id=done")
    assert code == 0, err
    return cwd


@pytest.fixture
def copy(finished: Path, tmp_path: Path) -> Path:
    """A private copy of the finished run's working directory."""
    subprocess.run(["cp", "-a", f"{finished}/.", str(tmp_path)], check=True)
    return tmp_path
