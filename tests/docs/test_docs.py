"""The manual cannot go stale: the reference is the schema's, the site builds, commands compose."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from once import MadeOnce

from experiments import results
from meta.cli import CONFIG_DIR, register_configs
from meta.config_docs import COMMAND, PAGE, render

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PROGRAMS = ("meta-train ", "meta-eval ")
LIST_ITEM = re.compile(r"\s*([-*+]|\d+[.)])\s")
FIGURES = tuple(f"experiments/{study.folder}/adaptation.png" for study in results.STUDIES)
STUDY_CONFIG = re.compile(r"experiments/[\w/]+\.yaml")


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
    pages = sorted(str(p.relative_to(DOCS)) for p in [*DOCS.rglob("*.md"), *DOCS.rglob("*.ipynb")])
    assert sorted(nav) == pages


def test_the_index_lists_every_page_of_the_nav_in_its_order() -> None:
    nav = [
        p
        for p in _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
        if p.endswith(".md")
    ]
    section = (DOCS / "index.md").read_text().split("\n## Pages\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \[[^]]+\]\(([^)#]+)\)", section, re.M)
    assert listed == [page for page in nav if page != "index.md"]


def lists_after_a_paragraph(text: str) -> list[int]:
    """Line numbers of list items that follow a paragraph line directly.

    Python-Markdown needs a blank line before a list; without one the items run on as the
    paragraph's text. Items of a list already open, headings, tables and code are not paragraphs.
    """
    found, in_code, in_list, previous = [], False, False, ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            in_code, in_list, previous = not in_code, False, ""
            continue
        if in_code:
            continue
        item = LIST_ITEM.match(line) is not None
        paragraph = previous.strip() and not previous.lstrip().startswith(("#", "|", "<", "!!!"))
        if item and paragraph and not in_list:
            found.append(number)
        if item:
            in_list = True
        elif line.strip() and not previous.strip() and not line.startswith((" ", "\t")):
            in_list = False  # a block after a blank line that is not indented ends the list
        previous = line
    return found


def test_the_list_check_finds_a_list_glued_to_its_paragraph() -> None:
    text = "Wall time:\n- glued\n\nOpen:\n\n- a\n  more\n- b\n\n  para of b\n1. c\n\n## Head\n- d\n"
    assert lists_after_a_paragraph(text) == [2]
    assert lists_after_a_paragraph("- a\n\nAfter the list:\n- glued\n") == [4]
    assert lists_after_a_paragraph("Steps:\n1. glued\n2. too\n") == [2]


@pytest.mark.parametrize("path", sorted(DOCS.rglob("*.md")), ids=lambda p: p.name)
def test_every_list_of_the_manual_has_a_blank_line_before_it(path: Path) -> None:
    assert lists_after_a_paragraph(path.read_text()) == [], f"{path.name}: add a blank line"


class _Images(HTMLParser):
    """The src of every <img> of a page, and every link to a PNG (a figure at full size)."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        source = dict(attrs).get("src" if tag == "img" else "href")
        if source and (tag == "img" or (tag == "a" and source.endswith(".png"))):
            self.sources.append(source)


def _images(page: Path) -> list[str]:
    parser = _Images()
    parser.feed(page.read_text())
    return parser.sources


def _build(root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(root / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def site(made_once: MadeOnce) -> Path:
    """The manual built strictly, outside the repository (once per session)."""
    return made_once("site", _build) / "site"


@pytest.mark.integration
def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "mlagents-fidelity" / "index.html").is_file()
    assert not (ROOT / "site").exists()
    assert not [p for p in site.rglob("*") if p.suffix in {".py", ".pyc"}], "the hook is no page"


@pytest.mark.integration
def test_every_image_of_the_site_resolves_and_the_studies_show_their_figures(site: Path) -> None:
    shown = set()
    for page in site.rglob("*.html"):
        for source in _images(page):
            if urlsplit(source).scheme:
                continue
            target = (page.parent / urlsplit(source).path).resolve()
            assert target.is_file(), f"{page.relative_to(site)}: {source}"
            shown.add(target.relative_to(site.resolve()).as_posix())
    assert set(FIGURES) <= shown
    assert set(FIGURES) <= {
        (site / "results").joinpath(src).resolve().relative_to(site.resolve()).as_posix()
        for src in _images(site / "results" / "index.html")
    }
    for figure in FIGURES:
        assert (site / figure).read_bytes() == (ROOT / figure).read_bytes()
    assert not list(DOCS.rglob("*.png")), "figures are served from experiments/, not copied"


def _without_commits(text: str) -> str:
    """A page with each study's commit masked: a shallow clone's history cannot name it."""
    return re.sub(r"commit [^;]+;", "commit …;", text)


def test_the_results_page_and_the_readme_table_agree_with_the_committed_outputs() -> None:
    readme = results.readme_with_table(results.README.read_text())
    for path, text in ((results.PAGE, results.render()), (results.README, readme)):
        page, made = _without_commits(path.read_text()), _without_commits(text)
        assert page == made, (
            f"{path.relative_to(ROOT)} disagrees with experiments/: "
            f"{results.first_difference(page, made)}; run {results.COMMAND}"
        )


def test_a_results_figure_that_disagrees_with_its_csv_is_named() -> None:
    page = results.render()
    line = next(
        line for line in page.splitlines() if line.startswith("| FindTarget | `test` | Reptile")
    )
    edited = page.replace(line, line.replace("3,072", "2,048", 1), 1)
    assert results.first_difference(edited, page).startswith("line ")
    assert "3,072" in results.first_difference(edited, page)


def test_every_study_configuration_the_manual_names_exists() -> None:
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in [*_sources(), *sorted((ROOT / "experiments").rglob("*.yaml"))]
        for name in STUDY_CONFIG.findall(path.read_text())
        if not (ROOT / name).is_file()
    ]
    assert not missing, f"no such study configuration: {missing[0]}"


def test_the_study_configuration_check_finds_a_missing_one() -> None:
    assert STUDY_CONFIG.findall("run `experiments/archive/gone.yaml` again") == [
        "experiments/archive/gone.yaml"
    ]


def _anchors(page: Path) -> set[str]:
    """The anchors mkdocs gives a page's headings."""
    return {results.slug(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}


def test_every_link_of_the_readme_into_the_manual_resolves_with_its_anchor() -> None:
    broken = []
    for page, anchor in re.findall(
        r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", (ROOT / "README.md").read_text()
    ):
        target = ROOT / page
        if not target.is_file() or (anchor and anchor not in _anchors(target)):
            broken.append(f"{page}#{anchor}" if anchor else page)
    assert not broken, f"README.md links to a page or anchor that does not exist: {broken[0]}"


NOTEBOOKS = {
    "meta_steps": "run_dir notebooks/example/tour",
    "sweep": "sweep_dir notebooks/example/lr_tour",
}


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_the_sites_notebooks_are_the_repositorys_executed_on_the_example_run(name: str) -> None:
    import nbformat  # here, not above: its import takes seconds and every worker collects this file

    source = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    shown = nbformat.read(DOCS / "notebooks" / f"{name}.ipynb", as_version=4)
    cells = [
        c.source for c in shown.cells if "injected-parameters" not in c.metadata.get("tags", [])
    ]
    again = f"papermill notebooks/{name}.ipynb docs/notebooks/{name}.ipynb -p {NOTEBOOKS[name]}"
    assert cells == [c.source for c in source.cells], (
        f"docs/notebooks/{name}.ipynb is stale: {again}"
    )
    outputs = [o for c in shown.cells if c.cell_type == "code" for o in c.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"], again
    assert str(ROOT) not in nbformat.writes(shown), f"{name}: a path of this machine in its outputs"


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


def _architecture_rows() -> list[tuple[str, str]]:
    """(first cell, whole row) of each table row of docs/architecture.md."""
    rows = []
    for line in (DOCS / "architecture.md").read_text().splitlines():
        if line.startswith("| `"):
            rows.append((line.split(" | ")[0], line))
    return rows


def test_the_architecture_page_names_every_module_in_its_folders_row() -> None:
    rows = _architecture_rows()
    unnamed = []
    for package in ("meta", "envs", "hydra_plugins"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            rel = path.relative_to(ROOT)
            folder = f"`{rel.parent.as_posix()}/`"
            named = any(f"`{rel.as_posix()}`" in first for first, _ in rows) or any(
                folder in first and f"`{path.name}`" in row for first, row in rows
            )
            if not named:
                unnamed.append(rel.as_posix())
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
