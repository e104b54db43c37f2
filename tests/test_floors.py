"""The floors of docs/architecture.md hold: every import of meta/, envs/ and the sweeper runs down.

Each module's imports are read from its source, at module level and inside functions alike. A
package imports only its own floor and the floors below it, two packages never import each
other, and no circle of modules exists inside a package.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TREES = ("envs", "meta", "hydra_plugins")


def floors() -> list[list[str]]:
    """The packages of each floor, bottom first, as the numbered list atop docs/architecture.md."""
    text = ARCHITECTURE.read_text().split("\n## ", 2)[1]
    found = []
    for line in text.splitlines():
        if re.match(r"\d+\. ", line):
            named = re.findall(r"`([\w/.]+)`", line.split(":", 1)[0])
            found.append([re.sub(r"/$|\.py$", "", name).replace("/", ".") for name in named])
    return found


def modules() -> dict[str, Path]:
    """Every module of the trees by dotted name (a package by its own name), empty ones left out."""
    found = {}
    for tree in TREES:
        for path in (ROOT / tree).rglob("*.py"):
            if not path.read_text().strip():
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(module of the trees, line, inside a function) for every absolute import in the file."""
    found = []
    tree = ast.parse(path.read_text())
    inside = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.append((name, node.lineno, id(node) in inside))
    return found


FLOORS = floors()
FLOOR_OF = {package: level for level, packages in enumerate(FLOORS) for package in packages}
MODULES = modules()


def package_of(module: str) -> str:
    """The longest package of the floors that holds `module`."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in FLOOR_OF:
            return ".".join(parts[:end])
    raise AssertionError(f"{module} is on no floor of docs/architecture.md")


EDGES = [
    (module, target, line, nested)
    for module, path in MODULES.items()
    for target, line, nested in imports(path, MODULES)
    if target != module
]


def where(module: str, line: int) -> str:
    """`path:line` of an import."""
    return f"{MODULES[module].relative_to(ROOT)}:{line}"


def test_the_floors_name_every_package_once() -> None:
    names = [package for packages in FLOORS for package in packages]
    assert len(FLOORS) >= 10 and len(names) == len(set(names)), FLOORS
    for module in MODULES:
        package_of(module)


def test_no_package_imports_a_floor_above_it() -> None:
    up = [
        f"{where(module, line)} imports {target}, on a floor above {package_of(module)}"
        for module, target, line, _ in EDGES
        if FLOOR_OF[package_of(target)] > FLOOR_OF[package_of(module)]
    ]
    assert not up, "\n".join(up)


def test_no_two_packages_import_each_other() -> None:
    first: dict[tuple[str, str], str] = {}
    for module, target, line, _ in EDGES:
        pair = (package_of(module), package_of(target))
        if pair[0] != pair[1]:
            first.setdefault(pair, f"{where(module, line)} imports {target}")
    both = [
        f"{seen} and {first[(b, a)]}" for (a, b), seen in first.items() if a < b and (b, a) in first
    ]
    assert not both, "\n".join(both)


@pytest.mark.parametrize("package", [p for packages in FLOORS for p in packages])
def test_no_circle_of_modules_inside_a_package(package: str) -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    lines = {}
    for module, target, line, _ in EDGES:
        if package_of(module) == package_of(target) == package:
            graph[module].add(target)
            lines[(module, target)] = where(module, line)
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        circle = error.args[1]
        steps = [f"{lines[(a, b)]} imports {b}" for a, b in zip(circle[1:], circle, strict=False)]
        pytest.fail("a circle of modules: " + "; ".join(steps))


def test_the_inner_ppo_never_imports_self_play() -> None:
    wrong = [
        f"{where(module, line)} imports {target}"
        for module, target, line, _ in EDGES
        if module.startswith("meta.algorithm.ppo") and target.startswith("meta.algorithm.selfplay")
    ]
    assert not wrong, "\n".join(wrong)


def test_no_algorithm_module_imports_another_inside_a_function() -> None:
    hidden = [
        f"{where(module, line)} imports {target} inside a function"
        for module, target, line, nested in EDGES
        if nested and package_of(module) == package_of(target) == "meta.algorithm"
    ]
    assert not hidden, "\n".join(hidden)
