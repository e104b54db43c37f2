"""The manual's cluster recipe for real: two searches share one study on a PostgreSQL server.

The server is pgserver's (the dev extra: PostgreSQL's own binaries in a wheel), started in the
test's folder, with a role that logs in by password only (scram-sha-256).
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from tinyconfig import TINY_SEARCH

optuna = pytest.importorskip("optuna")
pgserver = pytest.importorskip("pgserver")
sqlalchemy = pytest.importorskip("sqlalchemy")

PASSWORD = "s3cret-Passw0rd"
SEARCH = [*TINY_SEARCH, "meta.steps=1", "hydra.sweeper.n_trials=5", "results_dir=search"]


@pytest.fixture
def postgres() -> Iterator[str]:
    """The URL of a database on a PostgreSQL server of this test's, its password in it.

    Its data lie outside pytest's folders, which each pytest run closes to other users again
    (as root, pgserver runs the server as a user of its own).
    """
    data = Path(tempfile.mkdtemp(prefix="meta-harness-postgres-"))
    server = pgserver.get_server(data, cleanup_mode="stop")
    try:
        server.psql(f"CREATE ROLE searcher LOGIN PASSWORD '{PASSWORD}';")
        server.psql("CREATE DATABASE studies OWNER searcher;")
        hba = data / "pg_hba.conf"
        hba.write_text("local studies searcher scram-sha-256\n" + hba.read_text())
        server.psql("SELECT pg_reload_conf();")
        socket = sqlalchemy.engine.make_url(server.get_uri()).query["host"]
        url = f"postgresql://searcher:{PASSWORD}@/studies?host={socket}"
        no_password = url.replace(f":{PASSWORD}@", "@")
        with pytest.raises(sqlalchemy.exc.OperationalError, match="password"):
            sqlalchemy.create_engine(no_password).connect().close()
        yield url
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def _trials_once(url: str, enough: Callable[[int], bool], search: subprocess.Popen[str]) -> int:
    """The number of the study's trials once `enough` holds of it (polled, read with SQL alone so
    as not to create Optuna's tables beside the search; the search must still be running)."""
    engine = sqlalchemy.create_engine(url)
    try:
        for _ in range(3000):  # a bound for a search that hangs, not a race: each poll waits
            try:
                with engine.connect() as connection:
                    rows = connection.execute(sqlalchemy.text("SELECT count(*) FROM trials"))
                    count = int(rows.scalar_one())
            except sqlalchemy.exc.ProgrammingError:  # no tables yet
                count = 0
            if enough(count):
                return count
            assert search.poll() is None, search.communicate()
            time.sleep(0.2)
    finally:
        engine.dispose()
    raise AssertionError(f"the study did not reach the trials waited for ({count})")


def trials_run(stdout: str) -> list[int]:
    """The numbers of the trials a search printed it started."""
    return [
        int(line.split()[2])
        for line in stdout.splitlines()
        if line.startswith("meta-train: trial ") and " of study reptile_optuna: " in line
    ]


@pytest.mark.slow
@pytest.mark.integration  # a PostgreSQL server and two meta-train processes at once
def test_two_searches_share_a_study_on_postgresql(tmp_path: Path, postgres: str) -> None:
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("FORCE_COLOR", None)

    def search(seed: int) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "meta", *SEARCH, f"hydra.sweeper.sampler.seed={seed}"]
        command.append(f"hydra.sweeper.storage='{postgres}'")  # quoted: its query holds a '='
        return subprocess.Popen(
            command,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # its process group: stopped and continued as one
        )

    # the first search is held once it has begun a trial, until the second has begun one too:
    # both then run trials of the study at once, whichever of them starts faster
    first = search(0)
    begun = _trials_once(postgres, lambda n: n > 0, first)
    os.killpg(first.pid, signal.SIGSTOP)
    second = search(1)
    try:
        _trials_once(postgres, lambda n: n > begun, second)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    searches = [first, second]
    outputs = [search.communicate(timeout=600) for search in searches]
    for search, (stdout, _) in zip(searches, outputs, strict=True):
        assert search.returncode == 0, "\n\n".join(o + e for o, e in outputs)
        assert "in postgresql://searcher:***@/studies?host=" in stdout
    study = optuna.load_study(study_name="reptile_optuna", storage=postgres)
    states = Counter(trial.state.name for trial in study.trials)
    assert states["RUNNING"] == states["FAIL"] == 0
    assert 5 <= states["COMPLETE"] <= 5 + 1  # each stops asking at 5; one may still be running
    run = [trials_run(stdout) for stdout, _ in outputs]
    assert all(run), "both searches ran trials of the study"
    assert sorted(run[0] + run[1]) == sorted(trial.number for trial in study.trials)
    objectives = list((tmp_path / "search").glob("*/search/objective.json"))
    assert len(objectives) == states["COMPLETE"]  # a run directory each, none trained twice
    for objective in objectives:
        run_dir = objective.parent.parent
        with (run_dir / "meta_steps.csv").open() as file:
            steps = [row["meta_step"] for row in csv.DictReader(file)]
        batch = yaml.safe_load((run_dir / "configuration.yaml").read_text())["meta"]
        assert steps == ["0"] * batch["meta_batch_size"]  # its one meta-step, trained once
    written = [p for p in (tmp_path / "search").rglob("*") if p.is_file()]
    assert tmp_path / "search" / "optimization_results.yaml" in written
    for path in written:
        assert PASSWORD.encode() not in path.read_bytes(), path
    for stdout, stderr in outputs:
        assert PASSWORD not in stdout + stderr
