"""`python -m meta` is meta-train, ended as its console script ends (meta/__main__.py,
meta/launch.py); in-process through runpy (tests/commandline.py)."""

from __future__ import annotations

from pathlib import Path

from commandline import run_module
from tinyconfig import TINY


def test_python_m_meta_is_meta_train_and_ends_with_its_code(tmp_path: Path) -> None:
    done, callbacks = run_module("meta", *TINY, "meta.steps=0", cwd=tmp_path)
    assert done.returncode == 2 and callbacks == 1  # the exit callbacks ran, then os._exit(2)
    assert done.stderr == "meta-train: error: meta.steps must be > 0, got 0\n", done.stderr
    assert list(tmp_path.iterdir()) == []
