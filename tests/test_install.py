"""What a default install brings: ONNX export (Brain.onnx) without an extra."""

from __future__ import annotations

import tomllib
from pathlib import Path

from meta.interop.onnx import available

ROOT = Path(__file__).resolve().parent.parent


def test_onnx_is_a_dependency_and_onnxruntime_only_a_test_one() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split("<")[0] for d in project["dependencies"]]
    assert "onnx" in names and "onnxruntime" not in names
    assert any(d.startswith("onnxruntime") for d in project["optional-dependencies"]["dev"])
    assert "export" not in project["optional-dependencies"]
    assert available()
