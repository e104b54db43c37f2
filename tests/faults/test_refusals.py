"""What a run refuses in one line, changing nothing: drift on resume, corrupt files, full disks.

The finished run is made once per session by a process (faults/conftest.py); the refusals of
its copies run in-process through meta-train's entry function (tests/commandline.py). The full
disks, faults of a running process, keep a process each.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from commandline import run_main
from faultkit import RUN, Reference, run, snapshot


def resume(cwd: Path, *args: str) -> tuple[int, str]:
    """meta-train <args> in `cwd`, in-process: its exit code and stderr."""
    done = run_main("meta-train", *args, cwd=cwd)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("seed=6", "seed (5 -> 6)"),
        ("ppo.learning_rate=0.001", "ppo.learning_rate"),
        ("env.num_areas=8", "env.num_areas (16 -> 8)"),
        ("network.hidden_units=64", "network.hidden_units (32 -> 64)"),
        ("env=unity", "env.backend (native -> unity)"),
    ],
)
def test_drift_on_resume_is_refused_naming_the_key(override: str, named: str, copy: Path) -> None:
    before = snapshot(copy / "results")
    code, err = resume(copy, "run_id=done", "resume=true", "meta.steps=6", override)
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert snapshot(copy / "results") == before


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _foreign(path: Path) -> None:
    torch.save({"state": Path("x")}, path)  # a pickle that weights_only refuses


def _missing_keys(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    del state["parameters"]
    torch.save(state, path)


def _bad_status(path: Path) -> None:
    (path.parent.parent / "run_logs" / "training_status.json").write_text("{not json")


def _older_table(path: Path) -> None:
    table = path.parent.parent / "meta_steps.csv"
    table.write_text(
        "".join(line.rsplit(",", 1)[0] + "\n" for line in table.read_text().splitlines())
    )


def _bad_header(path: Path) -> None:
    table = path.parent.parent / "meta_steps.csv"
    table.write_text(table.read_text().replace("meta_step,", "meta_stpe,", 1))


class _RunsCode:
    """Unpickling this would call os.system (it never runs: the load refuses it)."""

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return (os.system, ("touch pwned",))


def _code(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    state["theta"] = _RunsCode()
    torch.save(state, path)


def _other_network(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    state["theta"] = {k: torch.zeros([n + 1 for n in v.shape]) for k, v in state["theta"].items()}
    torch.save(state, path)


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (_truncate, "corrupt checkpoint"),
        (lambda p: p.write_bytes(b""), "corrupt checkpoint"),
        (_foreign, "holds code (pathlib.PosixPath), not weights: refused"),
        (_code, f"holds code ({os.system.__module__}.system), not weights: refused"),
        (_missing_keys, "missing parameters"),
        (_other_network, "holds weights of another network"),
        (_bad_status, "invalid JSON"),
        (_bad_header, "meta_steps.csv: header ['meta_stpe'"),
        (_older_table, "meta_steps.csv was written before its columns ["),
    ],
)
def test_a_damaged_run_is_refused_in_one_line_before_any_write(
    damage: object, named: str, copy: Path
) -> None:
    checkpoint = copy / "results" / "done" / "Brain" / "checkpoint.pt"
    damage(checkpoint)  # type: ignore[operator]
    before = snapshot(copy)
    code, err = resume(copy, "run_id=done", "resume=true", "meta.steps=6")
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert "Traceback" not in err and "weights_only" not in err, err
    assert snapshot(copy) == before  # configuration.yaml and the status included


@pytest.mark.heavy  # a resumed training
def test_an_older_versions_update_table_resumes_without_it(copy: Path) -> None:
    table = copy / "results" / "done" / "inner_updates.csv"
    table.write_text(
        "".join(line.rsplit(",", 1)[0] + "\n" for line in table.read_text().splitlines())
    )
    before = snapshot(copy)
    code, err = resume(copy, "run_id=done", "resume=true", "meta.steps=6")
    assert code == 2 and err.count("\n") == 1 and "was written before its columns" in err, err
    assert "resume with logger.per_update_csv=false" in err and snapshot(copy) == before
    old = table.read_bytes()
    code, err = resume(
        copy, "run_id=done", "resume=true", "meta.steps=6", "logger.per_update_csv=false"
    )
    assert code == 0, err
    assert table.read_bytes() == old


def test_verbose_shows_the_traceback(copy: Path) -> None:
    _truncate(copy / "results" / "done" / "Brain" / "checkpoint.pt")
    code, err = resume(copy, "--verbose", "run_id=done", "resume=true", "meta.steps=6")
    assert code == 2 and "Traceback" in err and "corrupt checkpoint" in err.splitlines()[-1]


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_full_disk_fault_names_the_file_and_the_last_good_meta_step(
    reference: Reference, tmp_path: Path
) -> None:
    code, err = run(tmp_path, *RUN, "run_id=full", fault="disk_full@2")
    assert code == 1 and err.count("\n") == 1, err
    assert "no space left on device writing" in err and "holds meta-steps 0..1" in err, err
    code, err = run(tmp_path, "run_id=full", "resume=true")
    assert code == 0, err
    assert reference.matches(tmp_path / "results" / "full")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, full after the first meta-step; skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0 or os.geteuid() != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_really_full_disk_is_one_line_and_resumes_elsewhere(
    reference: Reference, small_disk: Path, tmp_path: Path
) -> None:
    code, err = run(tmp_path, *RUN, "run_id=tight", f"results_dir={small_disk}")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "no space left on device writing" in err and str(small_disk) in err, err
    if "holds meta-steps" not in err:
        return  # the disk filled before the first commit: nothing to resume, and it says so
    (tmp_path / "results").mkdir()
    subprocess.run(["cp", "-a", str(small_disk / "tight"), str(tmp_path / "results")], check=True)
    code, err = run(tmp_path, "run_id=tight", "resume=true")
    assert code == 0, err
    assert reference.matches(tmp_path / "results" / "tight")
