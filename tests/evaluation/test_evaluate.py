"""meta-eval: statistics against hand values, outputs of a tiny run, one-line input errors."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import envs
from meta.algorithm.ppo.train import policy_for
from meta.config import Config, NetworkConfig
from meta.evaluation.adapt import policy_actor, run_episodes
from meta.evaluation.evaluate import evaluate, plan
from meta.evaluation.statistics import (
    Measurement,
    bootstrap_ci,
    iqm,
    steps_to_threshold,
    summarise,
)
from meta.run.directory import RunError
from meta.trainer import train

Factory = Callable[..., Config]
TINY_EVAL = [
    "eval.budgets=[0,1,2]",
    "eval.seeds=2",
    "eval.tasks_per_family=1",
    "eval.buffer_size=128",
    "eval.eval_episodes=4",
    "eval.bootstrap_samples=200",
]
ADAPTATION_COLUMNS = [
    "method",
    "family",
    "split",
    "task",
    "seed",
    "budget",
    "env_steps",
    "mean_reward",
    "success",
]
SUMMARY_COLUMNS = [
    "method",
    "family",
    "split",
    "budget",
    "env_steps",
    "n",
    "reward_iqm",
    "reward_low",
    "reward_high",
    "success_iqm",
    "success_low",
    "success_high",
    "steps_to_threshold",
]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


# --- statistics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, 3, 4, 5, 6, 7, 8], 4.5),  # cut 2 each end: (3+4+5+6)/4
        ([10, 1, 2, 3, 100, 4, 5, -50], 3.5),  # outliers cut: (2+3+4+5)/4
        ([1, 2, 3, 4, 100], 3.0),  # cut floor(5/4) = 1 each end
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 4.5),  # cut 2: (2+...+7)/6
        ([7.0], 7.0),
    ],
)
def test_iqm_hand_values(values: list[float], expected: float) -> None:
    assert float(iqm(values)) == pytest.approx(expected)


def test_iqm_along_an_axis() -> None:
    rows = np.array([[1, 2, 3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3, 2, 1000]])
    assert iqm(rows, axis=1).tolist() == pytest.approx([4.5, 5.5])


def test_bootstrap_ci_contains_the_iqm_shrinks_with_data_and_is_seeded() -> None:
    data = np.random.default_rng(0).normal(size=(4, 400))
    small, large = data[:, :5], data
    low_s, high_s = bootstrap_ci(small, np.random.default_rng(1), 1000)
    low_l, high_l = bootstrap_ci(large, np.random.default_rng(1), 1000)
    assert low_s <= iqm(small.ravel()) <= high_s
    assert low_l <= iqm(large.ravel()) <= high_l
    assert high_l - low_l < (high_s - low_s) / 3
    assert bootstrap_ci(small, np.random.default_rng(1), 1000) == (low_s, high_s)


def test_bootstrap_is_stratified_by_task() -> None:
    # Each task gives the same value for every seed: resampling seeds within tasks cannot move
    # the IQM (a plain bootstrap over all 12 values would).
    per_task = np.repeat(np.array([[0.0], [1.0], [2.0], [3.0]]), 3, axis=1)
    low, high = bootstrap_ci(per_task, np.random.default_rng(0), 500)
    assert low == high == pytest.approx(1.5)


def test_steps_to_threshold() -> None:
    steps, success = [0, 100, 200, 500], [0.0, 0.3, 0.85, 0.9]
    assert steps_to_threshold(steps, success, 0.8) == 200
    assert steps_to_threshold(steps, success, 0.0) == 0
    assert math.isnan(steps_to_threshold(steps, success, 0.95))


def _measurements(method: str, curve: list[float], split: str = "test") -> list[Measurement]:
    return [
        Measurement(method, "FindTarget", split, task, seed, b, 100 * b, -1.0, v, 4, "{}")
        for b, v in zip([0, 1, 2, 5], curve, strict=True)
        for task in range(2)
        for seed in range(3)
    ]


def test_summary_cells_and_steps_to_80_percent_of_the_best_final_success() -> None:
    rows = (
        _measurements("reptile", [0.1, 0.7, 0.9, 1.0])
        + _measurements("scratch", [0.0, 0.1, 0.3, 0.5])
        + _measurements("joint", [0.2, 0.8, 0.8, 0.8])
        + _measurements("reptile", [0.0, 0.0, 0.0, 0.0], "train")
    )
    cells = summarise(rows, samples=100)
    assert [(c.method, c.split) for c in cells if c.budget == 0] == [
        ("reptile", "test"),
        ("scratch", "test"),
        ("joint", "test"),
        ("reptile", "train"),
    ]
    reached = {(c.method, c.split): c.steps_to_threshold for c in cells}
    # best final success 1.0 -> threshold 0.8, met by reptile at budget 2, joint at 1
    assert reached["reptile", "test"] == 200
    assert reached["joint", "test"] == 100
    assert math.isnan(reached["scratch", "test"])
    assert math.isnan(reached["reptile", "train"])  # nobody succeeds: nothing is reached
    cell = next(c for c in cells if (c.method, c.budget) == ("scratch", 5))
    assert (cell.n, cell.env_steps, cell.success_iqm) == (6, 500, pytest.approx(0.5))
    assert cell.success_low == cell.success_high == pytest.approx(0.5)


# --- meta-eval on a tiny run -------------------------------------------------------------------


def eval_config(tiny_config: Factory, run_id: str, *overrides: str) -> Config:
    return tiny_config(f"run_id={run_id}", *TINY_EVAL, *overrides)


def test_meta_eval_writes_every_output_and_reuses_its_joint_baseline(
    tiny_config: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = train(tiny_config("meta.steps=2"), "tiny")
    checked = plan(eval_config(tiny_config, "tiny"), "tiny")
    assert not (run_dir / "eval").exists()  # planning writes nothing
    cells = evaluate(checked)
    out = run_dir / "eval"
    rows = read_csv(out / "adaptation.csv")
    assert list(rows[0])[: len(ADAPTATION_COLUMNS)] == ADAPTATION_COLUMNS
    # 3 starts x 2 families x 2 splits x 1 task x 2 seeds x 3 budgets
    assert len(rows) == 72
    assert {r["method"] for r in rows} == {"reptile", "scratch", "joint"}
    assert {r["split"] for r in rows} == {"train", "test"}
    assert {int(r["env_steps"]) for r in rows} == {0, 128, 256}
    assert all(0.0 <= float(r["success"]) <= 1.0 for r in rows)
    summary = read_csv(out / "summary.csv")
    assert list(summary[0]) == SUMMARY_COLUMNS and len(summary) == len(cells) == 36
    assert (out / "adaptation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    joint = out / "joint" / "Brain.pt"
    assert joint.is_file()
    joint_config = OmegaConf.load(out / "joint" / "configuration.yaml")
    run_config = OmegaConf.load(run_dir / "configuration.yaml")
    assert joint_config.meta.algorithm == "joint"
    assert joint_config.meta.steps == run_config.meta.steps
    assert joint_config.ppo.max_steps == run_config.ppo.max_steps
    stamp = joint.stat().st_mtime_ns
    again = plan(eval_config(tiny_config, "tiny"), "tiny")
    assert again.joint is not None and again.joint.train is None  # reused, not retrained
    assert joint.stat().st_mtime_ns == stamp


def test_same_start_same_measurements_paired_across_methods(tiny_config: Factory) -> None:
    # Every start adapts with the same seeds on the same tasks: identical weights (the run
    # given as its own joint baseline) must give identical rows.
    train(tiny_config("meta.steps=1"), "self")
    cfg = eval_config(tiny_config, "self", "eval.joint_run_id=self", "eval.splits=[test]")
    evaluate(plan(cfg, "self"))
    rows = read_csv(Path(cfg.results_dir) / "self" / "eval" / "adaptation.csv")
    keys = ("family", "task", "seed", "budget", "mean_reward", "success")
    by_method = {
        m: [tuple(r[k] for k in keys) for r in rows if r["method"] == m]
        for m in ("reptile", "joint")
    }
    assert by_method["reptile"] == by_method["joint"] and len(by_method["joint"]) == 12
    assert not (Path(cfg.results_dir) / "self" / "eval" / "joint").exists()


@pytest.mark.parametrize("deterministic", [True, False])
def test_run_episodes_counts_whole_first_episodes_per_area(deterministic: bool) -> None:
    env = envs.make("FindTarget", num_areas=3, seed=0, max_step=5)
    policy = policy_for(env, NetworkConfig(hidden_units=8))
    generator = torch.Generator().manual_seed(0)
    reward, success, episodes = run_episodes(env, policy_actor(policy, deterministic, generator), 5)
    assert episodes == 6  # ceil(5 / 3) = 2 episodes from each of the 3 areas
    assert 0.0 <= success <= 1.0 and -1.5 < reward < 1.5


# --- bad input ---------------------------------------------------------------------------------


@pytest.fixture
def fake_run(tiny_config: Factory) -> Callable[..., Path]:
    """A run directory with a configuration and, unless told otherwise, fitting weights."""

    def make(run_id: str, weights: bool = True) -> Path:
        cfg = tiny_config()
        run_dir = Path(cfg.results_dir) / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "configuration.yaml").write_text(OmegaConf.to_yaml(asdict(cfg)))
        if weights:
            policy = policy_for(envs.make("FindTarget"), cfg.network)
            torch.save(policy.state_dict(), run_dir / "Brain.pt")
        return run_dir

    return make


def listing(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.budgets=[]"], "eval.budgets is empty"),
        (["eval.budgets=[0,-1]"], "eval.budgets must be >= 0"),
        (["eval.seeds=0"], "eval.seeds must be > 0"),
        (["eval.splits=[valid]"], "eval.splits"),
        (["eval.joint_run_id=nowhere"], "eval.joint_run_id: run 'nowhere' does not exist"),
    ],
)
def test_bad_options_fail_before_any_work(
    tiny_config: Factory, fake_run: Callable[..., Path], overrides: list[str], message: str
) -> None:
    run_dir = fake_run("run")
    before = listing(run_dir.parent)
    with pytest.raises(ValueError, match=message):
        plan(eval_config(tiny_config, "run", *overrides), "run")
    assert listing(run_dir.parent) == before


def test_missing_run_and_run_without_weights(
    tiny_config: Factory, fake_run: Callable[..., Path]
) -> None:
    with pytest.raises(RunError, match="does not exist"):
        plan(eval_config(tiny_config, "ghost"), "ghost")
    fake_run("empty", weights=False)
    with pytest.raises(RunError, match="has no weights"):
        plan(eval_config(tiny_config, "empty"), "empty")


def meta_eval(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The meta-eval entry point in a fresh interpreter (console script or not)."""
    code = "import sys; from meta.cli import eval_main; sys.argv[0] = 'meta-eval'; eval_main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("run_id", "extra", "message"),
    [
        ("empty", [], "has no weights"),
        ("run", ["eval.joint_run_id=nowhere"], "run 'nowhere' does not exist"),
        ("run", ["meta.steps=3"], "the run's configuration.yaml decides meta"),
    ],
)
def test_cli_errors_are_one_line_and_write_nothing(
    fake_run: Callable[..., Path], tmp_path: Path, run_id: str, extra: list[str], message: str
) -> None:
    run_dir = fake_run(run_id, weights=run_id != "empty")
    before = listing(tmp_path)
    done = meta_eval(tmp_path, f"run_id={run_id}", f"results_dir={run_dir.parent}", *extra)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meta-eval: error: "), done.stderr
    assert message in lines[0]
    assert listing(tmp_path) == before
