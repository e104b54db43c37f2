"""The README's two commands stay true: CI runs exactly its test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text(), re.S)[:2]


def test_readme_starts_with_the_main_job_and_the_tests() -> None:
    main, tests = commands()
    assert main.startswith("python3.11 -m venv .venv") and main.endswith("&& meta-train")
    assert "pip install torch==2.13.0 && pip install -e" in main
    assert tests.endswith("python -m pytest")


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = commands()
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_readme_is_a_front_door_that_sends_readers_to_the_manual() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 130
    for page in re.findall(r"\]\((docs/[^)#]+)\)", text):
        assert (ROOT / page).is_file(), page
    assert "docs/reference/configuration.md" in text and "meta-bench:begin" not in text
