"""Several runs' objectives measured together: each run's adaptations stack with the others'.

A member's adaptation has the same bits in any stack of two or more, so each run's objective
and its adaptation.csv are bitwise those it measures alone; a run whose measurement cannot be
planned gets its own error, and the others are measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from tinyconfig import TINY, compose_config

from meta.config import Config
from meta.evaluation.objective import OBJECTIVE_FILE, measure_objective, measure_objectives
from meta.runtime import jobs as jobs_module
from meta.runtime.jobs import Job, stacks
from meta.trainer import train

pytestmark = pytest.mark.heavy

MEASURED = [
    "eval.budgets=[0,1]",
    "eval.seeds=2",
    "eval.tasks_per_family=1",
    "eval.splits=[train]",
    "eval.buffer_size=128",
    "eval.eval_episodes=4",
    "eval.bootstrap_samples=100",
    "optimized_metric=success_iqm@1",
    "meta.steps=1",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Config, Path]]:
    """Two tiny runs of other seeds and learning rates, each with an objective."""
    results = tmp_path_factory.mktemp("objectives")
    made = []
    for seed, rate in ((0, 3e-4), (1, 1e-3)):
        own = [f"seed={seed}", f"ppo.learning_rate={rate}", f"results_dir={results}"]
        cfg = compose_config([*TINY, *MEASURED, *own])
        made.append((cfg, train(cfg, f"run{seed}")))
    return made


def _written(run_dir: Path) -> tuple[bytes, bytes]:
    objective = run_dir / OBJECTIVE_FILE
    return objective.read_bytes(), objective.with_name("adaptation.csv").read_bytes()


def test_objectives_measured_together_are_bitwise_each_measured_alone(
    runs: list[tuple[Config, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, list[list[int]]]] = []

    def recorded(jobs: Sequence[Job[object]], builds: bool = False) -> list[list[int]]:
        calls.append((len(jobs), found := stacks(jobs, builds)))
        return found

    monkeypatch.setattr(jobs_module, "stacks", recorded)
    together = measure_objectives(runs)
    (count, groups), *_ = calls  # the first run's jobs, then the second's
    assert any(min(group) < count // 2 <= max(group) for group in groups)
    written = [_written(run_dir) for _, run_dir in runs]
    assert all(isinstance(value, float) for value in together)
    for (cfg, run_dir), value, files in zip(runs, together, written, strict=True):
        assert measure_objective(cfg, run_dir) == value
        assert _written(run_dir) == files


def test_a_run_that_cannot_be_measured_gets_its_error_and_the_others_their_values(
    runs: list[tuple[Config, Path]], tmp_path: Path
) -> None:
    (cfg, run_dir), _ = runs
    alone = measure_objective(cfg, run_dir)
    gone = tmp_path / "gone"
    none = measure_objectives([(runs[1][0], gone), (cfg, run_dir)])
    assert isinstance(none[0], Exception) and "gone" in str(none[0])
    assert none[1] == alone
