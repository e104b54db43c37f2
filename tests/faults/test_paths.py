"""Path tricks: a run id is a name, and nothing outside the run is deleted, written or followed.

meta-train and meta-eval run in-process through their entry functions (tests/commandline.py):
what is tested is which paths they read, write and refuse, not the process.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from commandline import run_main
from faultkit import RUN, snapshot


def run(cwd: Path, *args: str) -> tuple[int, str]:
    """meta-train <args> in `cwd`, in-process: its exit code and stderr."""
    done = run_main("meta-train", *args, cwd=cwd)
    return done.returncode, done.stderr


TRICKS = ["..", ".", "../escape", "/an/absolute/path", "a/b", ".a", "...", "tab\there"]


@pytest.fixture
def nest(copy: Path) -> Path:
    """parent/{beside.txt, rd/done}: a results_dir with a run, a file beside it."""
    parent = copy / "parent"
    parent.mkdir()
    (parent / "beside.txt").write_text("keep me")
    shutil.move(copy / "results", parent / "rd")
    return parent


@pytest.mark.parametrize("run_id", TRICKS)
def test_a_path_for_a_run_id_is_refused_before_anything_is_touched(run_id: str, nest: Path) -> None:
    before = snapshot(nest), sorted(p.name for p in (nest / "rd").iterdir())
    code, err = run(nest, *RUN, "results_dir=rd", f"run_id='{run_id}'", "force=true")
    assert code == 2 and err.count("\n") == 1 and "is not a run name" in err, err
    assert (snapshot(nest), sorted(p.name for p in (nest / "rd").iterdir())) == before


def _meta_eval(cwd: Path, *args: str) -> tuple[int, str]:
    done = run_main("meta-eval", *args, cwd=cwd)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("program", "override", "key"),
    [
        ("meta-train", "initialize_from=.hidden", "initialize_from"),
        ("meta-eval", "run_id='..'", "run_id"),
        ("meta-eval", "eval.run_ids=[done,'../done']", "eval.run_ids"),
        ("meta-eval", "eval.joint_run_id='/x'", "eval.joint_run_id"),
    ],
)
def test_every_key_naming_a_run_takes_names_only(
    program: str, override: str, key: str, nest: Path
) -> None:
    before = snapshot(nest)
    if program == "meta-train":
        code, err = run(nest, *RUN, "results_dir=rd", "run_id=new", override)
    else:
        code, err = _meta_eval(nest, "results_dir=rd", "run_id=done", override)
    assert code == 2 and err.count("\n") == 1 and f"{key}=" in err, err
    assert "is not a run name" in err and snapshot(nest) == before


@pytest.mark.heavy  # a training
def test_initialize_from_a_path_reads_that_run_and_never_writes_it(nest: Path) -> None:
    elsewhere = nest.parent / "elsewhere"
    elsewhere.mkdir()
    shutil.move(nest / "rd" / "done", elsewhere / "done")
    before = snapshot(elsewhere)
    code, err = run(
        nest, *RUN, "results_dir=rd", "run_id=warm", "initialize_from=../elsewhere/done"
    )
    assert code == 0, err
    assert snapshot(elsewhere) == before and (nest / "rd" / "warm" / "Brain.pt").is_file()


@pytest.fixture
def outside(nest: Path) -> Path:
    """A folder outside results_dir holding a file named as a run's checkpoint."""
    folder = nest.parent / "outside"
    folder.mkdir()
    (folder / "checkpoint.pt").write_bytes(b"someone else's file")
    return folder


@pytest.mark.heavy  # a training
def test_a_symlink_out_of_the_run_is_refused_on_resume_and_removed_on_force(
    nest: Path, outside: Path
) -> None:
    run_dir = nest / "rd" / "done"
    shutil.rmtree(run_dir / "Brain")
    (run_dir / "Brain").symlink_to(outside, target_is_directory=True)
    before = snapshot(nest), snapshot(outside)
    code, err = run(nest, "results_dir=rd", "run_id=done", "resume=true", "meta.steps=6")
    assert code == 2 and err.count("\n") == 1 and "outside the run: refused" in err, err
    assert (snapshot(nest), snapshot(outside)) == before

    code, err = run(nest, *RUN, "results_dir=rd", "run_id=done", "force=true")
    assert code == 0, err
    assert snapshot(outside) == before[1] and not (run_dir / "Brain").is_symlink()


@pytest.mark.heavy  # a training
def test_a_run_directory_that_is_a_symlink_is_refused_on_resume_and_unlinked_on_force(
    nest: Path, outside: Path
) -> None:
    shutil.move(nest / "rd" / "done", outside / "done")
    (nest / "rd" / "done").symlink_to(outside / "done", target_is_directory=True)
    before = snapshot(outside)
    code, err = run(nest, "results_dir=rd", "run_id=done", "resume=true", "meta.steps=6")
    assert code == 2 and err.count("\n") == 1 and "is a symlink" in err, err
    assert snapshot(outside) == before

    code, err = run(nest, *RUN, "results_dir=rd", "run_id=done", "force=true")
    assert code == 0, err
    assert snapshot(outside) == before and not (nest / "rd" / "done").is_symlink()


@pytest.mark.heavy  # a resumed training
def test_symlinks_that_stay_inside_the_run_are_accepted(nest: Path) -> None:
    run_dir = nest / "rd" / "done"
    (run_dir / "latest").symlink_to("Brain", target_is_directory=True)  # as wandb's latest-run
    code, err = run(nest, "results_dir=rd", "run_id=done", "resume=true", "meta.steps=5")
    assert code == 0, err
