"""Shared fixtures: the real Hydra composition, shrunk, with outputs under tmp_path."""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from portblocks import port_blocks
from tinyconfig import TINY, compose_config

from meta.config import Config


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread in the test processes, as meta-train's default (torch_threads=1).

    Each pytest-xdist worker has a core; two threads each would make the workers' OpenMP
    threads wait on each other. Tests of two threads ask for them (`torch_threads(2)`).
    """
    torch.set_num_threads(1)
    if not hasattr(config, "workerinput"):  # once, in pytest-xdist's controller
        _compile_the_package()


def _compile_the_package() -> None:
    """Byte-compile the project once for the hundreds of processes the tests start.

    Under PYTHONDONTWRITEBYTECODE no process writes its bytecode, so each meta-train, meta-eval
    and build would compile the package from source again (half a second each on 2 cores).
    """
    if sys.flags.dont_write_bytecode:
        root = Path(__file__).resolve().parent.parent
        for package in ("meta", "envs", "hydra_plugins"):
            compileall.compile_dir(root / package, quiet=1)


LEFT_OUT_OF_THE_QUICK_LOOP = ("slow", "integration", "heavy")
"""Markers of the tests the quick loop (`-m quick`) leaves to the whole suite."""
HEAVY_UNMARKED = frozenset(
    {
        # seconds of stacked or grouped trainings and adaptations
        "test_joint_pretrainings_of_several_seeds_train_as_one_group_to_rounding",
        "test_stacked_adaptations_give_the_rows_of_each_adapted_alone",
        "test_with_workers_the_joint_pretrainings_train_side_by_side_to_the_same_bits",
        "test_fomaml_runs_spends_the_query_buffer_and_resumes_bitwise",
        "test_games_are_measured_by_win_rates_against_random_and_theta",
        "test_adam_epsilon_is_1e_7_where_mlagents_keeps_torchs_1e_8",
        "test_gradients_are_clipped_to_max_grad_norm_and_inf_is_mlagents_unclipped",
        "test_one_or_two_torch_threads_train_the_same_weights",
        "test_gradient_steps_at_the_default_sizes_fault_almost_no_pages_in",
        # worker processes
        "test_workers_take_the_matmul_precision_of_the_process_that_starts_them",
        "test_training_requests_give_the_same_weights_in_worker_processes",
        "test_calls_come_back_in_the_jobs_order",
    }
)
"""Tests that train, measure or start workers for seconds, by name, where their modules do
not mark them heavy: left out of the quick loop as the marked ones are."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `quick` every test that starts no process, trains for no more than a moment and
    needs no Ray cluster (one takes seconds to start): the loop run before each commit.

    Before `-m` selects (pytest's own hook runs after the conftests' ones).
    """
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            continue
        if getattr(item, "originalname", item.name) in HEAVY_UNMARKED:
            continue
        if not any(item.get_closest_marker(name) for name in LEFT_OUT_OF_THE_QUICK_LOOP):
            item.add_marker(pytest.mark.quick)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test of an xdist_group that pytest-xdist's --dist loadgroup did not keep together.

    Spread over workers, a group (the Ray tests' one cluster) would still pass, only slower:
    pytest 9.2 broke the grouping silently (pytest-dev/pytest-xdist#1386), hence the dev
    extra's pin; this says so instead.
    """
    grouped = getattr(item.config.option, "loadgroup", False)
    if grouped and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail(
            f"pytest-xdist ran this test outside its xdist_group under pytest {pytest.__version__}"
            ": install the dev extra's pytest (pip install -e '.[dev]')",
            pytrace=False,
        )


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., Config]:
    """A factory of tiny configs writing under tmp_path."""

    def make(*overrides: str) -> Config:
        return compose_config([*TINY, f"results_dir={tmp_path / 'results'}", *overrides])

    return make


@pytest.fixture
def free_ports() -> Iterator[Callable[..., int]]:
    """A function: the first of `count` consecutive TCP ports this test holds alone on the
    machine (tests/portblocks.py), not ones that merely nobody listened on a moment ago."""
    with port_blocks() as take:
        yield take


PLAIN_ENV = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
"""The environment without the variables that would make rich colour a piped console."""


def _meta_train(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meta", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**PLAIN_ENV, "WANDB_MODE": "offline"},
    )


@pytest.fixture
def meta_train() -> Callable[..., subprocess.CompletedProcess[str]]:
    """A function: `meta-train <args>` run as a process in `cwd`, wandb offline, output kept."""
    return _meta_train
