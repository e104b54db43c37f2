"""The manual cannot go stale: the reference is the schema's, the site builds, commands compose."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from meta.cli import CONFIG_DIR, register_configs
from meta.config_docs import COMMAND, PAGE, render

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PROGRAMS = ("meta-train ", "meta-eval ")


def test_the_configuration_reference_is_generated_from_the_schema() -> None:
    assert PAGE.read_text() == render(), f"docs/reference/configuration.md is stale: run {COMMAND}"


def test_the_reference_lists_every_key_with_its_docstring() -> None:
    page = render()
    for key in ("`meta.steps`", "`ppo.max_grad_norm`", "`ppo.self_play.window`", "`eval.seeds`"):
        assert f"| {key} |" in page, key
    assert "| `meta.steps` | `int` | `100` | Meta-steps K. |" in page


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    return []


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


@pytest.mark.integration
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "mlagents-fidelity" / "index.html").is_file()
    assert not (ROOT / "site").exists()


def commands(text: str) -> list[list[str]]:
    """The meta-train and meta-eval commands of a page's bash blocks that are concrete.

    Placeholders (`<run_id>`), multiruns and launcher options are left out: what remains must
    compose with the schema exactly as typed.
    """
    found = []
    for block in re.findall(r"```bash\n(.+?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():  # a continued line is one command
            line = re.sub(r"\s+#.*$", "", line).strip()
            if not line.startswith(PROGRAMS) or "<" in line or "&&" in line:
                continue
            words = shlex.split(line)[1:]
            if any(word.startswith("-") for word in words):
                continue
            found.append(words)
    return found


def _sources() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_manual_composes(path: Path) -> None:
    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for overrides in commands(path.read_text()):
            OmegaConf.to_object(compose(config_name="config", overrides=overrides))


def test_the_manual_has_commands_to_check() -> None:
    assert sum(len(commands(path.read_text())) for path in _sources()) >= 15
