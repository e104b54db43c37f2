"""meta-eval: outputs of a tiny run, episodes counted by hand, one-line input errors."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from commandline import run_main
from omegaconf import OmegaConf

import envs
from meta.algorithm.ppo.network import policy_for
from meta.config import Config
from meta.config.ppo import NetworkConfig
from meta.evaluation.episodes import policy_actor, run_episodes
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.evaluation.statistics import Cell, iqm
from meta.run.directory import RunError
from meta.runtime.envpool import EnvPool
from meta.trainer import train
from tests.algorithm.stacking import mean_action

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
    "steps_to_80",
    "meta_seeds",
    "adaptation",
    "pretraining",
]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


# --- meta-eval on a tiny run -------------------------------------------------------------------


def eval_config(tiny_config: Factory, run_id: str, *overrides: str) -> Config:
    return tiny_config(f"run_id={run_id}", *TINY_EVAL, *overrides)


@pytest.mark.heavy
def test_meta_eval_writes_every_output_and_reuses_its_joint_baseline(
    tiny_config: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = train(tiny_config("meta.steps=2"), "tiny")
    checked = plan_eval(eval_config(tiny_config, "tiny"), "tiny")
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
    # each measurement: one whole first episode in each of eval.eval_episodes=4 areas
    assert {int(r["episodes"]) for r in rows} == {4}
    assert {float(r["success"]) * 4 for r in rows} <= {0.0, 1.0, 2.0, 3.0, 4.0}
    summary = read_csv(out / "summary.csv")
    assert list(summary[0]) == SUMMARY_COLUMNS and len(summary) == len(cells) == 36
    cell_keys = ("method", "family", "split", "budget")
    for cell in summary:  # each summary row is the IQM of its adaptation rows
        mine = [r for r in rows if all(r[k] == cell[k] for k in cell_keys)]
        assert (int(cell["n"]), cell["env_steps"]) == (len(mine), mine[0]["env_steps"])
        for metric, column in (("mean_reward", "reward_iqm"), ("success", "success_iqm")):
            expected = iqm([float(r[metric]) for r in mine])
            assert float(cell[column]) == pytest.approx(expected, abs=1e-9)
            low, high = (float(cell[column.replace("iqm", end)]) for end in ("low", "high"))
            # an interval of IQMs of resampled values: within the values' own range
            values = [float(r[metric]) for r in mine]
            assert min(values) <= low <= high <= max(values)
    assert (out / "adaptation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    improvement = read_csv(out / "improvement.csv")
    assert list(improvement[0]) == [
        "family",
        "split",
        "method",
        "baseline",
        "probability",
        "ci_low",
        "ci_high",
    ]
    pairs = {(r["family"], r["split"], r["method"], r["baseline"]) for r in improvement}
    assert len(pairs) == len(improvement) == 8  # reptile over scratch and joint, 2 x 2 splits
    for r in improvement:
        assert float(r["ci_low"]) <= float(r["probability"]) <= float(r["ci_high"])
    joint = out / "joint" / "Brain.pt"
    assert joint.is_file()
    joint_config = OmegaConf.load(out / "joint" / "configuration.yaml")
    run_config = OmegaConf.load(run_dir / "configuration.yaml")
    assert joint_config.meta.algorithm == "joint"
    assert joint_config.meta.steps == run_config.meta.steps
    assert joint_config.ppo.max_steps == run_config.ppo.max_steps
    stamp = joint.stat().st_mtime_ns
    again = plan_eval(eval_config(tiny_config, "tiny"), "tiny")
    assert again.joint is not None and again.joint.train is None  # reused, not retrained
    assert joint.stat().st_mtime_ns == stamp
    # written before a setting existed, it is still the same training: the setting's default
    saved = out / "joint" / "configuration.yaml"
    del joint_config.ppo["buffer_assembly"]
    OmegaConf.save(joint_config, saved)
    older = plan_eval(eval_config(tiny_config, "tiny"), "tiny")
    assert older.joint is not None and older.joint.train is None
    joint_config.ppo.num_epoch += 1  # another training: trained again
    OmegaConf.save(joint_config, saved)
    other = plan_eval(eval_config(tiny_config, "tiny"), "tiny")
    assert other.joint is not None and other.joint.train is not None
    assert other.joint.train.torch_matmul_precision == "highest"
    # trained again at meta-eval's matmul precision, which its adaptations run at
    medium = plan_eval(eval_config(tiny_config, "tiny", "torch_matmul_precision=medium"), "tiny")
    assert medium.joint is not None and medium.joint.train is not None
    assert medium.joint.train.torch_matmul_precision == "medium"
    assert joint.stat().st_mtime_ns == stamp  # planning writes nothing


@pytest.mark.heavy
def test_a_joint_run_is_evaluated_as_its_own_joint_start(tiny_config: Factory) -> None:
    # meta=joint: the run is the joint baseline, so nothing is pretrained and its start is
    # compared with scratch (it used to stop with StopIteration, a baseline's weights looked for)
    run_dir = train(tiny_config("meta.steps=2", "meta=joint"), "tiny_joint")
    checked = plan_eval(eval_config(tiny_config, "tiny_joint"), "tiny_joint")
    assert checked.joint is None
    evaluate(checked)
    out = run_dir / "eval"
    rows = read_csv(out / "adaptation.csv")
    assert {r["method"] for r in rows} == {"joint", "scratch"}
    assert {r["pretraining"] for r in rows} == {""}
    assert not (out / "joint").exists()
    assert not (out / "improvement.csv").exists()  # no meta-learned start to compare


@pytest.mark.heavy
def test_same_start_same_measurements_paired_across_methods(tiny_config: Factory) -> None:
    # Every start adapts with the same seeds on the same tasks: identical weights (the run
    # given as its own joint baseline) must give identical rows.
    train(tiny_config("meta.steps=1"), "self")
    cfg = eval_config(tiny_config, "self", "eval.joint_run_id=self", "eval.splits=[test]")
    evaluate(plan_eval(cfg, "self"))
    rows = read_csv(Path(cfg.results_dir) / "self" / "eval" / "adaptation.csv")
    keys = ("family", "task", "seed", "budget", "mean_reward", "success")
    by_method = {
        m: [tuple(r[k] for k in keys) for r in rows if r["method"] == m]
        for m in ("reptile", "joint")
    }
    assert by_method["reptile"] == by_method["joint"] and len(by_method["joint"]) == 12
    assert not (Path(cfg.results_dir) / "self" / "eval" / "joint").exists()


def stand_still(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 2), np.float32)


def head_for_the_target(obs: np.ndarray) -> np.ndarray:
    towards = obs[:, 4:6]  # target minus agent (FindTarget's observation)
    return towards / np.linalg.norm(towards, axis=1, keepdims=True)


def test_run_episodes_counts_whole_first_episodes_per_area_with_hand_values() -> None:
    # Standing still, the shaping term is zero (the distance never changes): -1/max_step per
    # step for max_step steps, and every episode times out.
    env = envs.make("FindTarget", num_areas=3, seed=0, max_step=5)
    reward, success, episodes = run_episodes(env, stand_still, 5)
    assert episodes == 6  # ceil(5 / 3) = 2 episodes from each of the 3 areas
    assert (reward, success) == (pytest.approx(-1.0, abs=1e-6), 0.0)
    # Heading straight for the target wins within max_step = 100 (the farthest spawn is 60
    # steps away): +1, minus at most 0.6 in step costs, plus the shaping the approach earns.
    env = envs.make("FindTarget", num_areas=3, seed=0)
    reward, success, episodes = run_episodes(env, head_for_the_target, 7)
    assert (success, episodes) == (1.0, 9)
    assert reward > 0.4


def test_policy_actor_acts_with_the_mean_or_samples_from_its_generator() -> None:
    env = envs.make("FindTarget", num_areas=64, seed=0)
    env.reset()
    obs = env.get_steps("Brain")[0].obs[0]
    policy = policy_for(env, NetworkConfig(hidden_units=8))
    mean = mean_action(policy, torch.from_numpy(obs)).numpy()
    greedy = policy_actor(policy, True, torch.Generator().manual_seed(0))
    assert np.array_equal(greedy(obs), mean) and np.array_equal(greedy(obs), greedy(obs))
    sampled = policy_actor(policy, False, torch.Generator().manual_seed(0))(obs)
    replayed = policy_actor(policy, False, torch.Generator().manual_seed(0))(obs)
    assert np.array_equal(sampled, replayed)
    noise = sampled - mean  # log std starts at 0: standard normal noise
    assert abs(noise.mean()) < 0.3 and 0.8 < noise.std() < 1.2


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
        plan_eval(eval_config(tiny_config, "run", *overrides), "run")
    assert listing(run_dir.parent) == before


def test_missing_run_and_run_without_weights(
    tiny_config: Factory, fake_run: Callable[..., Path]
) -> None:
    with pytest.raises(RunError, match="does not exist"):
        plan_eval(eval_config(tiny_config, "ghost"), "ghost")
    fake_run("empty", weights=False)
    with pytest.raises(RunError, match="has no weights"):
        plan_eval(eval_config(tiny_config, "empty"), "empty")


@pytest.mark.parametrize(
    ("run_id", "extra", "message"),
    [
        ("empty", [], "has no weights"),
        ("run", ["eval.joint_run_id=nowhere"], "run 'nowhere' does not exist"),
        ("run", ["meta.steps=3"], "the run's configuration.yaml decides meta"),
        ("run", ["eval.adaptation=[{reset:[value_net]}]"], "unknown reset 'value_net'"),
        ("run", ["eval=search", "eval.search.trials=0"], "eval.search.trials must be >= 1"),
    ],
)
def test_cli_errors_are_one_line_and_write_nothing(
    fake_run: Callable[..., Path], tmp_path: Path, run_id: str, extra: list[str], message: str
) -> None:
    run_dir = fake_run(run_id, weights=run_id != "empty")
    before = listing(tmp_path)
    done = run_main(
        "meta-eval", f"run_id={run_id}", f"results_dir={run_dir.parent}", *extra, cwd=tmp_path
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meta-eval: error: "), done.stderr
    assert message in lines[0]
    assert listing(tmp_path) == before


@pytest.mark.heavy  # a whole meta-eval
def test_eval_quick_on_the_command_line_writes_every_output_in_80_columns(
    tiny_config: Factory, tmp_path: Path
) -> None:
    train(tiny_config("meta.steps=1"), "quick")
    results = tmp_path / "results"
    args = ["run_id=quick", f"results_dir={results}", "eval=quick", "eval.buffer_size=128"]
    args += ["eval.budgets=[0,1]", "eval.seeds=1", "eval.tasks_per_family=1"]  # episodes: quick's
    done = run_main("meta-eval", *args, cwd=tmp_path, columns=80)
    assert done.returncode == 0, done.stderr
    out = results / "quick" / "eval"
    for name in ("adaptation.csv", "summary.csv", "steps_to_80.csv", "adaptation.png"):
        assert (out / name).stat().st_size > 0, name
    # quick's 32 episodes a measurement (the default's 64): 2 whole episodes of each of 16 areas
    assert {r["episodes"] for r in read_csv(out / "adaptation.csv")} == {"32"}
    *lines, last = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80  # the bar and the tables; `last` names paths
    assert sum("task-seeds" in line for line in lines) == 8  # 2 families x 2 splits x 2 metrics
    assert last.startswith("meta-eval: done.")


# --- several meta-training runs ----------------------------------------------------------------


def sequential_and_parallel(
    tiny_config: Factory, run_id: str, *overrides: str
) -> tuple[list[Cell], Path]:
    """meta-eval in this process and in 2 worker processes: the same cells, the same file."""
    from meta.runtime.envpool import EnvPool
    from meta.runtime.executor import LocalExecutor, ProcessExecutor

    sequential = eval_config(tiny_config, run_id, *overrides, "eval.out_dir=${results_dir}/seq")
    parallel = eval_config(tiny_config, run_id, *overrides, "eval.out_dir=${results_dir}/par")
    cells = evaluate(plan_eval(sequential, run_id), executor=LocalExecutor(EnvPool(sequential.env)))
    executor = ProcessExecutor(2, parallel.env)
    try:
        assert evaluate(plan_eval(parallel, run_id), executor=executor) == cells
    finally:
        executor.close()
    out = Path(sequential.results_dir)
    assert (out / "seq" / "adaptation.csv").read_text() == (
        out / "par" / "adaptation.csv"
    ).read_text()
    return cells, out


@pytest.mark.integration
def test_several_runs_side_by_side_processes_give_the_sequential_results(
    tiny_config: Factory,
) -> None:
    for seed in (0, 1):
        train(tiny_config("meta.steps=1", f"seed={seed}"), f"s{seed}")
    runs = ["eval.run_ids=[s0,s1]", "eval.splits=[test]", "eval.budgets=[0,1]"]
    cells, out = sequential_and_parallel(tiny_config, "s0", *runs)
    rows = read_csv(out / "seq" / "adaptation.csv")
    assert {r["meta_seed"] for r in rows} == {"0", "1"}
    scratch = {(r["meta_seed"], r["seed"]) for r in rows if r["method"] == "scratch"}
    assert scratch == {("0", "0"), ("0", "1"), ("1", "2"), ("1", "3")}  # not repeated
    assert {c.meta_seeds for c in cells} == {"0+1"}
    per_seed = read_csv(out / "seq" / "summary_per_seed.csv")
    assert {r["meta_seeds"] for r in per_seed} == {"0", "1"}
    steps = read_csv(out / "seq" / "steps_to_80.csv")
    assert list(steps[0]) == [
        "family",
        "split",
        "method",
        "steps_to_80",
        "ci_low",
        "ci_high",
        "adaptation",
        "selected_on",
        "pretraining",
        "auc",
        "auc_low",
        "auc_high",
    ]
    assert {r["selected_on"] for r in steps} == {"train"}
    assert (out / "s0" / "eval" / "joint" / "Brain.pt").is_file()  # a baseline per seed
    assert (out / "s1" / "eval" / "joint" / "Brain.pt").is_file()


@pytest.mark.heavy
def test_runs_that_differ_in_more_than_the_seed_or_lack_weights_are_refused(
    tiny_config: Factory, fake_run: Callable[..., Path]
) -> None:
    train(tiny_config("meta.steps=1"), "a")
    train(tiny_config("meta.steps=1", "seed=1", "ppo.learning_rate=0.001"), "b")
    with pytest.raises(ValueError, match=r"differ only in seed: 'b' has ppo.learning_rate=0.001"):
        plan_eval(eval_config(tiny_config, "a", "eval.run_ids=[a,b]"), "a")
    train(tiny_config("meta.steps=1", "seed=2"), "c")
    (Path(tiny_config().results_dir) / "c" / "Brain.pt").unlink()
    (Path(tiny_config().results_dir) / "c" / "Brain" / "checkpoint.pt").unlink()
    with pytest.raises(RunError, match="run 'c' has no weights"):
        plan_eval(eval_config(tiny_config, "a", "eval.run_ids=[a,c]"), "a")


@pytest.mark.integration
def test_parallel_adaptation_on_builds_takes_its_own_ports_and_gives_the_sequential_results(
    tiny_config: Factory, free_ports: Callable[..., int]
) -> None:
    span = EnvPool(tiny_config("env=unity").env).span  # worker ids (ports) of one pool
    port = free_ports(3 * span)  # the driver's block and one per worker (slots claimed)
    unity = ("env=unity", "env.num_areas=8", f"env.base_port={port}")
    train(tiny_config("meta.steps=1", *unity), "u")
    # joint trains on native areas only: the run stands in as its own baseline
    # one seed: 6 jobs on builds, 2 at a time, are enough to show the ports kept apart
    sequential_and_parallel(
        tiny_config,
        "u",
        *unity,
        "eval.splits=[test]",
        "eval.budgets=[0,1]",
        "eval.joint_run_id=u",
        "eval.seeds=1",
    )
