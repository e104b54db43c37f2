"""Atomic writes: the old file survives any failure and no temporary file is left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from meta.process.atomic import atomic_path, atomic_write_bytes, atomic_write_text


def _leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_write_text_and_bytes_create_parents_and_replace(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "file.txt"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second ✓")
    assert target.read_text(encoding="utf-8") == "second ✓"
    atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert _leftovers(target.parent) == []


def test_mode_follows_umask_not_tempfile_default(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "f.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.json").stat().st_mode) == 0o644


def test_failure_inside_atomic_path_keeps_old_content(tmp_path: Path) -> None:
    target = tmp_path / "out.onnx"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("exporter crashed")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []
