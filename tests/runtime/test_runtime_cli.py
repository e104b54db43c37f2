"""meta-train on Ray as users run it: bad runtime keys, a whole run, sweeps on Hydra's launchers."""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from commandline import run_main

from envs.backend.host import free_ports

MetaTrain = Callable[..., subprocess.CompletedProcess[str]]
TINY = ["experiment=tiny", "logger=quiet", "meta.steps=2"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("runtime.num_actors=0", "runtime.num_actors must be >= 1, got 0"),
        ("runtime.cpus_per_actor=0", "runtime.cpus_per_actor must be > 0"),
        ("runtime.torch_threads=-1", "runtime.torch_threads must be > 0"),
        ("runtime.address=nohost", "is not `auto` or host:port"),
        ("runtime.num_cpus=1", "needs 2 CPUs; the Ray cluster has 1"),
        ("runtime.backend=slurm", "runtime.backend: unknown 'slurm'"),
    ],
)
def test_bad_runtime_keys_are_one_line_exit_2_and_write_nothing(
    tmp_path: Path, override: str, message: str
) -> None:
    """Refused by the configuration's checks, before Ray starts: in-process."""
    args = ["runtime=ray", override, *TINY, "results_dir=results"]
    done = run_main("meta-train", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("meta-train: error: ") and message in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration  # Ray's client connects, and gives up, in the process it starts in
def test_an_address_where_nothing_answers_is_one_line_nonzero_and_writes_nothing(
    tmp_path: Path, meta_train: MetaTrain
) -> None:
    address = f"runtime.address=127.0.0.1:{free_ports(1)}"
    done = meta_train("runtime=ray", address, *TINY, "results_dir=results", cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("meta-train: error: ") and "nothing answers there" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration  # meta-train runs as a process, on a Ray cluster it starts
def test_a_run_on_its_own_local_ray_cluster(tmp_path: Path, meta_train: MetaTrain) -> None:
    done = meta_train("runtime=ray", "meta.meta_batch_size=2", *TINY, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "results").iterdir()
    assert run_dir.name == "reptile-experiment_tiny-meta.meta_batch_size_2-meta.steps_2"
    with (run_dir / "meta_steps.csv").open() as f:
        assert [r["meta_step"] for r in csv.DictReader(f)] == ["0", "0", "1", "1"]
    assert (run_dir / "Brain.pt").is_file()


@pytest.mark.parametrize(
    "launcher",
    [
        ["hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2"],
        ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"],
    ],
)
@pytest.mark.integration  # meta-train runs as a process, its jobs on a cluster launcher
def test_a_sweep_on_a_cluster_launcher_gives_each_job_a_whole_run(
    tmp_path: Path, launcher: list[str], meta_train: MetaTrain
) -> None:
    done = meta_train("--multirun", *launcher, "seed=0,1", *TINY, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    runs = sorted(
        p.name
        for p in (tmp_path / "results").iterdir()
        if p.is_dir() and not p.name.startswith(".")
    )
    assert runs == [f"reptile-experiment_tiny-meta.steps_2-seed_{s}" for s in (0, 1)]
    for run in runs:
        run_dir = tmp_path / "results" / run
        for name in ("configuration.yaml", "run_logs/training_status.json", "Brain.pt"):
            assert (run_dir / name).is_file(), (run, name)
        with (run_dir / "meta_steps.csv").open() as f:
            assert [r["meta_step"] for r in csv.DictReader(f)] == ["0", "1"]
