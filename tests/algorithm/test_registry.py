"""The meta-learners' registry: every name has a class, and only the registry reads the name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from meta.algorithm.registry import LEARNERS, learner_class
from meta.algorithm.reptile import MetaLearner

META = Path(__file__).resolve().parents[2] / "meta"
REGISTRY = META / "algorithm" / "registry.py"


def _is_name(node: ast.AST) -> bool:
    """`x.algorithm` or a bare `algorithm`: the meta-learner's name."""
    return (isinstance(node, ast.Attribute) and node.attr == "algorithm") or (
        isinstance(node, ast.Name) and node.id == "algorithm"
    )


def _is_constant(node: ast.AST) -> bool:
    """A string, a tuple of them, or a module constant (UPPER_CASE) standing for one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_constant(e) for e in node.elts)
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return bool(name) and name.isupper()


def name_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing the algorithm's name with a constant, or looking it up in a literal."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_is_name, sides)) and any(_is_constant(s) for s in sides if not _is_name(s)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            literal = isinstance(node.func.value, ast.Dict) and node.func.attr == "get"
            if literal and node.args and _is_name(node.args[0]):
                lines.append(node.lineno)
    return lines


def test_only_the_registry_compares_the_algorithm_name() -> None:
    """A new meta-learner is a file and a registry line: no module branches on its name."""
    found = [
        f"{path.relative_to(META.parent)}:{line}"
        for path in sorted(META.rglob("*.py"))
        if path != REGISTRY
        for line in name_comparisons(ast.parse(path.read_text(), str(path)))
    ]
    assert found == []


def test_the_check_finds_a_comparison() -> None:
    """The walk above sees the forms it forbids (so an empty list means something)."""
    code = (
        "if cfg.meta.algorithm == 'fomaml': pass\n"
        "x = algorithm in LEARNERS_OF_ONE_KIND\n"
        "n = {'single': 1}.get(meta.algorithm, 2)\n"
        "ok = cfg.meta.algorithm == other.meta.algorithm\n"
    )
    assert name_comparisons(ast.parse(code)) == [1, 2, 3]


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_every_name_has_its_class(name: str) -> None:
    """Each registry line loads a MetaLearner that knows its own name."""
    cls = learner_class(name)
    assert issubclass(cls, MetaLearner) and cls.name == name


def test_an_unknown_name_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match=r"meta\.algorithm: unknown 'maml'"):
        learner_class("maml")
