"""A search's batch of trials trains as one group of runs, as `seeds=[...]` does.

With Hydra's basic launcher the `n_jobs` trials of a batch train in lockstep in one process:
the inner trainings that share their settings (not their learning rates, betas or epsilons)
train as one stack. Each trial's run is the one it has alone: the same run id and
configuration, θ bitwise the same in the same group again and, where a lone inner training
gets companions, to TOLERANCE of its run alone. A trial that fails ends alone as a failed trial.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from commandline import Done, run_main
from tinyconfig import TINY_SEARCH

optuna = pytest.importorskip("optuna")

pytestmark = pytest.mark.heavy  # searches of three trials, in-process

SHARED = pytest.mark.xdist_group("trials_together")  # the one grouped search they read
STEPS = 2
SEARCH = [
    "-m",
    *TINY_SEARCH,
    f"meta.steps={STEPS}",
    "ppo.max_steps=1024",
    "meta.meta_batch_size=1",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.n_jobs=3",
    "results_dir=search",
]
"""Three trials of one batch: one inner training a meta-step each, of one shape and budget."""
OWN = ["ppo.learning_rate=tag(log, interval(1e-4, 1e-3))", "ppo.beta=interval(1e-3, 1e-2)"]
"""What each trial samples for itself, beside meta.outer_lr."""
ROTATION = "+environment_parameters.motor_rotation"
FAILING = [f"{ROTATION}=choice(0, 90, 500)", "hydra.sweeper.max_failure_rate=0.5"]
"""A rotation a trial may sample and a task cannot take (outside [-180, 180]): the training
of a trial that samples 500 fails at its first meta-step (the sampler's seed 0 gives one)."""
TOLERANCE = 1e-5
"""max |Δθ| between a trial trained in a group and alone, where its lone inner training (alone:
a stack of one, a single network's kernels) has companions in the group's stack."""


def _runs(results: Path) -> list[Path]:
    return sorted(p for p in results.iterdir() if (p / "configuration.yaml").is_file())


def _theta(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "Brain" / "checkpoint.pt", weights_only=True)["theta"]


def _search(*overrides: str, cwd: Path) -> Done:
    """The search in this process through meta-train's entry function (the trials' grouping
    is the launcher's and the sweeper's, not the interpreter's)."""
    return run_main("meta-train", *SEARCH, *overrides, cwd=cwd)


def _states(results: Path) -> list[tuple[str, dict[str, object]]]:
    study = optuna.load_study(study_name="reptile_optuna", storage=f"sqlite:///{results}/optuna.db")
    return [(t.state.name, t.params) for t in study.trials]


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results_dir of a search of three trials trained as one group."""
    cwd = tmp_path_factory.mktemp("grouped")
    done = _search(*OWN, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return cwd / "search"


@SHARED
def test_a_batch_of_trials_trains_as_one_stack_each_with_its_own_settings(grouped: Path) -> None:
    assert [state for state, _ in _states(grouped)] == ["COMPLETE"] * 3
    runs = _runs(grouped)
    assert len(runs) == 3
    rates = set()
    for run in runs:
        timers = json.loads((run / "run_logs" / "timers.json").read_text())
        stacks = timers["children"]["meta_step"]["children"]["inner_training"]["count"]
        assert stacks == STEPS  # the three trials' trainings: one stack a meta-step
        assert len(timers["metadata"]["shared_with_runs"].split(",")) == 2
        config = yaml.safe_load((run / "configuration.yaml").read_text())
        rates.add(config["ppo"]["learning_rate"])
        assert (run / "search" / "objective.json").is_file() and (run / "Brain.pt").is_file()
    assert len(rates) == 3


@SHARED
def test_a_trial_in_the_same_group_again_is_bitwise_the_same(grouped: Path, tmp_path: Path) -> None:
    done = _search(*OWN, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    again = _runs(tmp_path / "search")
    assert [r.name for r in again] == [r.name for r in _runs(grouped)]
    for run in again:
        assert (run / "Brain.pt").read_bytes() == (grouped / run.name / "Brain.pt").read_bytes()


@SHARED
def test_a_trial_alone_is_its_grouped_run_to_the_tolerance(grouped: Path, tmp_path: Path) -> None:
    alone = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"]  # one trial at a time, alone
    done = _search(*OWN, *alone, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    runs = _runs(tmp_path / "search")
    assert [r.name for r in runs] == [r.name for r in _runs(grouped)]
    for run in runs:
        together = grouped / run.name
        timers = json.loads((run / "run_logs" / "timers.json").read_text())
        assert "shared_with_runs" not in timers["metadata"]  # it did train alone
        config = (run / "configuration.yaml").read_text()
        assert config == (together / "configuration.yaml").read_text()
        a, b = _theta(run), _theta(together)
        assert max(float((a[k] - b[k]).abs().max()) for k in a) <= TOLERANCE


def test_a_trial_that_fails_ends_alone_and_the_others_complete(tmp_path: Path) -> None:
    done = _search(*FAILING, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = tmp_path / "search"
    states = _states(results)
    assert {state for state, _ in states} == {"COMPLETE", "FAIL"}
    for state, params in states:
        assert (state == "FAIL") == (params[ROTATION] == 500)
    best = yaml.safe_load((results / "optimization_results.yaml").read_text())
    assert best["best_params"][ROTATION] != 500
    for run in _runs(results):
        failed = "motor_rotation_500" in run.name
        assert (run / "Brain.pt").is_file() != failed
        assert not (results / f".{run.name}.lock").exists()
        line = (
            "failed: CarryObject parameter motor_rotation=500 is outside [-180, 180] before the "
            f"first meta-step completed; nothing to resume (start '{run.name}' over with "
            "force=true)"
        )
        assert (line in done.stdout) == failed
    # the same command continues the study: n_trials finished ones in all, at most
    again = _search(*FAILING, cwd=tmp_path)
    finished = sum(state == "COMPLETE" for state, _ in states)
    assert f"{finished} of 3 trials finished (3 in all)" in again.stdout
    after = _states(results)
    assert len(after) == 4 and after[:3] == states
    last, params = after[3]
    assert (last == "FAIL") == (params[ROTATION] == 500)
    assert again.returncode == (1 if last == "FAIL" else 0), again.stderr
