"""envs.bench_unity (which meta-bench runs) from a venv that is neither activated nor the project's.

The project is copied without a `.venv` beside `envs/`, and a fresh venv sees it and this
venv's packages through a `.pth` file; its interpreter then runs by full path with a PATH whose
`python3` lacks the project's packages, as when a user starts `/path/to/venv/bin/meta-bench`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
MEASURE = """
import sys
from pathlib import Path
import envs
from envs import bench_unity
assert Path(envs.__file__).is_relative_to(sys.argv[1]), envs.__file__
rate, _ = bench_unity.through_unity("FindTarget", 2, 20, Path(sys.argv[2]))
print(f"rate {rate:.0f}")
"""


def outside_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the project without `.venv`, and a venv's python that imports it."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "envs", project / "envs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "mlagents_pb_compat.py", project)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    packages = sysconfig.get_paths()["purelib"]
    (site / "project.pth").write_text(f"{project}\nimport site; site.addsitedir({packages!r})\n")
    return project, venv / "bin" / "python"


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_builds_run_the_interpreter_of_a_venv_that_is_not_activated(tmp_path: Path) -> None:
    project, python = outside_venv(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.pop("META_HARNESS_PYTHON", None)
    env["PATH"] = "/usr/bin:/bin"  # python3 here, if any, has none of the project's packages
    done = subprocess.run(
        [str(python), "-c", MEASURE, str(project), str(tmp_path / "logs")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("rate ") and float(done.stdout.split()[1]) > 0
