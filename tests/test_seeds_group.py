"""meta-train seeds=[...]: each seed's run as `seed=<s>` alone writes it.

A member of a stack trains bitwise the same whatever else is stacked with it, so with two
trainings per meta-step (each seed's run stacks alone too) a group's runs are the alone runs
bitwise; with one (alone it trains as a stack of one) they agree to rounding.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from commandline import run_main

from meta.process.faults import FAULT_ENV

TINY = ["experiment=tiny", "logger=quiet", "meta.steps=3"]
PAIRED = [*TINY, "meta.meta_batch_size=2"]
"""Two trainings per meta-step: each run stacks them alone as well."""
GROUP = [*PAIRED, "seeds=[0,1]"]
TOLERANCE = 1e-5
"""max |Δθ| where a lone training (alone: a stack of one) has companions in the group."""


IDS = [f"reptile-experiment_tiny-meta.meta_batch_size_2-meta.steps_3-seed_{s}" for s in (0, 1)]
"""The ids `seed=<s>` with GROUP's other overrides derives (runtime and logger are not in them)."""


def _rows(run: Path) -> list[dict[str, str]]:
    """meta_steps.csv without its wall times."""
    rows = list(csv.DictReader((run / "meta_steps.csv").open()))
    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in rows]


def _theta(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "Brain" / "checkpoint.pt", weights_only=True)["theta"]


def _faulted(cwd: Path, fault: str, *args: str) -> subprocess.CompletedProcess[str]:
    """meta-train with a fault point (a real signal at a named point)."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({"WANDB_MODE": "offline", FAULT_ENV: fault})
    command = [sys.executable, "-m", "meta", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """results/ of the uninterrupted group of seeds 0 and 1."""
    cwd = tmp_path_factory.mktemp("group")
    done = run_main("meta-train", *GROUP, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return cwd / "results"


@pytest.mark.heavy  # three runs of three meta-steps, in-process
@pytest.mark.xdist_group("seeds_group")  # the group's one run
def test_each_run_of_a_group_is_its_seed_alone_bitwise(group: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in group.iterdir()) == IDS
    for seed, run_id in enumerate(IDS):
        done = run_main("meta-train", *PAIRED, f"seed={seed}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        alone, together = tmp_path / "results" / run_id, group / run_id
        assert (alone / "Brain.pt").read_bytes() == (together / "Brain.pt").read_bytes()
        assert (alone / "configuration.yaml").read_text() == (
            together / "configuration.yaml"
        ).read_text()
        config = yaml.safe_load((together / "configuration.yaml").read_text())
        assert (config["seed"], config["seeds"], config["run_id"]) == (seed, None, run_id)
        assert _rows(alone) == _rows(together)
    assert not torch.equal(*(_theta(group / i)["actor.0.weight"] for i in IDS))
    for run_id, other in zip(IDS, reversed(IDS), strict=True):  # the timers say they are shared
        timers = json.loads((group / run_id / "run_logs" / "timers.json").read_text())
        assert timers["metadata"]["shared_with_runs"] == other
        assert (
            "shared_with_runs"
            not in json.loads(
                (tmp_path / "results" / run_id / "run_logs" / "timers.json").read_text()
            )["metadata"]
        )


@pytest.mark.heavy  # two runs of three meta-steps, in-process
def test_one_training_per_meta_step_agrees_with_alone_to_rounding(tmp_path: Path) -> None:
    together = run_main("meta-train", *TINY, "seeds=[3,4]", "run_id=g", cwd=tmp_path)
    assert together.returncode == 0, together.stderr
    alone = run_main("meta-train", *TINY, "seed=4", "run_id=a", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    results = tmp_path / "results"
    assert sorted(p.name for p in results.iterdir() if not p.name.startswith(".")) == [
        "a",
        "g-seed_3",
        "g-seed_4",
    ]
    a, g = _theta(results / "a"), _theta(results / "g-seed_4")
    moved = min(float(row["theta_delta_norm"]) for row in _rows(results / "g-seed_4"))
    assert max(float((a[k] - g[k]).abs().max()) for k in a) < TOLERANCE < moved / 100


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["seeds=[0,1]", "seed=3"], "leave seed= out"),
        (["seeds=[0,1,0]"], "names seed 0 more than once"),
        (["seeds=[]"], "names no seed"),
        (["seeds=[0,1]", "runtime=batched"], "runtime=batched is gone"),
        (["-m", "seeds=[0,1]"], "does not combine with --multirun"),
        (["seeds=[0,1]", "resume=true"], "does not exist"),
    ],
)
def test_a_group_that_cannot_run_is_refused_in_one_line_writing_nothing(
    args: list[str], message: str, tmp_path: Path
) -> None:
    refused = run_main("meta-train", *TINY, *args, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and message in refused.stderr, refused.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration  # meta-train runs as a process, stopped by a real signal
@pytest.mark.xdist_group("seeds_group")  # the group's one run
def test_an_interrupted_group_resumes_alone_or_together_to_the_same_runs(
    group: Path, tmp_path: Path
) -> None:
    # SIGINT while seed 0 commits meta-step 1: seed 1 commits it too before the group stops
    stopped = _faulted(tmp_path, "before_commit@1:SIGINT", *GROUP)
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.count("\n") == 1 and "hold meta-steps 0..1" in stopped.stderr
    resume = shlex.split(stopped.stderr.split("Resume with: ")[1])
    assert resume[0] == "meta-train" and "resume=true" in resume
    # one run on its own, then the rest as the group
    alone = run_main("meta-train", *PAIRED, "seed=0", "resume=true", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    together = run_main("meta-train", *resume[1:], cwd=tmp_path)
    assert together.returncode == 0, together.stderr
    for run_id in IDS:
        ours, reference = tmp_path / "results" / run_id, group / run_id
        assert (ours / "Brain.pt").read_bytes() == (reference / "Brain.pt").read_bytes()
        assert _rows(ours) == _rows(reference)


JOINT = [*TINY, "meta.algorithm=joint", "run_id=j"]


@pytest.mark.integration  # meta-train runs as a process, stopped by a real signal
def test_a_group_of_joint_runs_stacks_its_chunks_and_resumes_bitwise(tmp_path: Path) -> None:
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    done = run_main("meta-train", *JOINT, "seeds=[0,1]", cwd=whole)
    assert done.returncode == 0, done.stderr
    stopped = _faulted(cut, "before_commit@1:SIGINT", *JOINT, "seeds=[0,1]")
    assert stopped.returncode == 130, stopped.stderr
    resumed = run_main("meta-train", *JOINT, "seeds=[0,1]", "resume=true", cwd=cut)
    assert resumed.returncode == 0, resumed.stderr
    for seed in (0, 1):
        ours, reference = cut / "results" / f"j-seed_{seed}", whole / "results" / f"j-seed_{seed}"
        assert (ours / "Brain.pt").read_bytes() == (reference / "Brain.pt").read_bytes()
        assert _rows(ours) == _rows(reference)
    alone = run_main("meta-train", *JOINT, "seed=1", "run_id=a", cwd=whole)  # its chunks unstacked
    assert alone.returncode == 0, alone.stderr
    a, g = _theta(whole / "results" / "a"), _theta(whole / "results" / "j-seed_1")
    delta = max(float((a[k] - g[k]).abs().max()) for k in a)
    assert 0 < delta < TOLERANCE  # stacked: the batched products round otherwise
