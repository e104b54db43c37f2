"""optuna-dashboard, run as the manual says, opens the study a search wrote, trials and all."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from commandline import run_main
from processes import wait_until
from tinyconfig import TINY_SEARCH

optuna = pytest.importorskip("optuna")

SEARCH = [*TINY_SEARCH, "meta.steps=1", "hydra.sweeper.n_trials=2", "results_dir=search"]
"""A real search of the committed space, two trials of one meta-step each."""


def answers(port: int) -> bool:
    """Whether a server accepts connections on the port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def get(port: int, path: str) -> Any:
    """The dashboard's JSON answer to GET `path`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
        assert answer.status == 200
        return json.loads(answer.read())


@pytest.mark.heavy
@pytest.mark.integration  # the dashboard's server process
def test_the_dashboard_shows_the_trials_a_search_stored(
    tmp_path: Path, free_ports: Callable[..., int]
) -> None:
    searched = run_main("meta-train", *SEARCH, cwd=tmp_path)
    assert searched.returncode == 0, searched.stderr
    stored = optuna.load_study(
        study_name="reptile_optuna", storage=f"sqlite:///{tmp_path}/search/optuna.db"
    )
    port = free_ports(1)
    dashboard = Path(sys.executable).parent / "optuna-dashboard"
    command = [str(dashboard), "sqlite:///search/optuna.db", "--port", str(port)]  # the manual's
    with (tmp_path / "dashboard.log").open("w") as log:
        server = subprocess.Popen(command, cwd=tmp_path, stderr=log, text=True)
        try:
            # it says "Listening" before it binds the port: the event is the port answering
            wait_until(lambda: answers(port), server)
            (summary,) = get(port, "/api/studies")["study_summaries"]
            assert summary["study_name"] == "reptile_optuna"
            assert summary["directions"] == ["maximize"]
            study = get(port, f"/api/studies/{summary['study_id']}?after=0")
        finally:
            server.terminate()
            server.wait(timeout=30)
    shown = {
        trial["number"]: (
            trial["state"],
            trial["values"],
            {p["name"]: p["param_external_value"] for p in trial["params"]},
        )
        for trial in study["trials"]
    }
    assert shown == {
        trial.number: (
            "Complete",
            trial.values,
            {name: str(value) for name, value in trial.params.items()},
        )
        for trial in stored.trials
    }
    assert len(shown) == 2
    assert set(shown[0][2]) == {"meta.outer_lr", "ppo.max_steps", "meta.meta_batch_size"}
