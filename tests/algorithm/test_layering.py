"""meta/algorithm/ without cycles: ppo/ never imports selfplay/; no import hides in a function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALGORITHM = ROOT / "meta" / "algorithm"


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, whether the import sits inside a function) for each import in a file."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = inside or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.ImportFrom) and child.module:
                found.append((child.module, nested))
            elif isinstance(child, ast.Import):
                found.extend((alias.name, nested) for alias in child.names)
            visit(child, nested)

    visit(ast.parse(path.read_text()), False)
    return found


def test_ppo_never_imports_selfplay() -> None:
    for path in (ALGORITHM / "ppo").glob("*.py"):
        modules = [module for module, _ in _imports(path)]
        assert not [m for m in modules if m.startswith("meta.algorithm.selfplay")], path.name


def test_no_algorithm_module_imports_another_inside_a_function() -> None:
    for path in ALGORITHM.rglob("*.py"):
        local = [m for m, inside in _imports(path) if inside and m.startswith("meta.algorithm")]
        assert not local, (path.relative_to(ROOT), local)
