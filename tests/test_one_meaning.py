"""Each name means one thing in meta/: the state_dict type, the plans, is_game, an error's line."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import pytest

from meta.errors import first_line, one_line

ROOT = Path(__file__).resolve().parents[1]
META = ROOT / "meta"


@functools.cache  # parsed once per process for the tests below, which only read the trees
def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(META.rglob("*.py"))]


def _defined(names: set[str]) -> dict[str, list[str]]:
    """Where each of `names` is defined at module level (def, class or assignment)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path, tree in _modules():
        for node in tree.body:
            targets: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                targets = [node.name]
            elif isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets = [node.target.id]
            for name in targets:
                if name in names:
                    found[name].append(path.relative_to(ROOT).as_posix())
    return found


def test_weights_is_one_type_defined_once() -> None:
    assert _defined({"Weights"}) == {"Weights": ["meta/algorithm/ppo/weights.py"]}


def test_plan_and_is_game_each_have_one_definition() -> None:
    found = _defined({"plan", "Plan", "is_game", "plan_training", "plan_eval"})
    assert found == {
        "is_game": ["meta/algorithm/training.py"],
        "plan_eval": ["meta/evaluation/plan.py"],
        "plan_training": ["meta/trainer/preflight.py"],
    }


def test_one_module_named_reference() -> None:
    assert [p.relative_to(ROOT).as_posix() for p in META.rglob("reference.py")] == [
        "meta/evaluation/reference.py"
    ]


def _first_lines(tree: ast.Module) -> list[int]:
    """Lines that take `....splitlines()[0]` of anything but a docstring."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value == 0
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "splitlines"
            and "__doc__" not in ast.unparse(node.value.func.value)
        ):
            lines.append(node.lineno)
    return lines


def test_an_errors_first_line_is_taken_in_one_place() -> None:
    # checkpoints.py cuts torch's own message (its reason, never its advice), not an error's
    allowed = {"meta/errors.py", "meta/run/checkpoints.py"}
    found = {
        path.relative_to(ROOT).as_posix(): _first_lines(tree)
        for path, tree in _modules()
        if _first_lines(tree)
    }
    assert set(found) <= allowed, found


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (ValueError("  bad key\nsecond line"), "bad key"),
        (ValueError(""), "ValueError"),
        (KeyError(), "KeyError"),
    ],
)
def test_first_line_is_the_message_or_the_type(error: BaseException, line: str) -> None:
    assert first_line(error) == line


def test_one_line_adds_each_unsuppressed_cause_once() -> None:
    try:
        try:
            try:
                raise OSError("disk full\ndetails")
            except OSError as inner:
                raise RuntimeError("could not write: disk full") from inner
        except RuntimeError as middle:
            raise ValueError("commit failed") from middle
    except ValueError as error:
        told = one_line(error)
    assert told == "commit failed (could not write: disk full)"
    try:
        try:
            raise OSError("hidden")
        except OSError:
            raise ValueError("shown") from None
    except ValueError as error:
        assert one_line(error) == "shown"
