"""meta-eval stacks its adaptations and joint pretrainings: each as alone, to rounding."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from tinyconfig import TINY_EVAL, TINY_MEASURE

from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.rollout import NullTimers
from meta.algorithm.training import stack_key, train_requests
from meta.algorithm.training import train as train_alone
from meta.config import Config, EnvConfig
from meta.config.evaluation import Procedure
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.adapt import AdaptJob, Setting
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.evaluation.tasks import sample_tasks
from meta.observe.tags import LEARNING_RATE
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import Job, OnCrash, give_up
from meta.trainer import train

Factory = Callable[..., Config]
R = TypeVar("R")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


class OneByOne:
    """Each job alone, on environments of its own (an adaptation trains as a stack of one)."""

    def run(self, jobs: Sequence[Job[R]], on_crash: OnCrash = give_up) -> Iterator[R]:
        """Every job's result, in order."""
        return (job(EnvPool(EnvConfig()), NullTimers()) for job in jobs)

    def close(self) -> None:
        """Nothing to release."""


def test_stacked_adaptations_give_the_rows_of_each_adapted_alone(tiny_config: Factory) -> None:
    train(tiny_config("meta.steps=1"), "run")
    both = ["run_id=run", *TINY_EVAL, "eval.joint_run_id=run", "eval.budgets=[0,1,2]"]
    for name, executor in (("seq", OneByOne()), ("stacked", None)):
        cfg = tiny_config(*both, f"eval.out_dir=${{results_dir}}/{name}")
        evaluate(plan_eval(cfg, "run"), executor=executor)
    out = Path(tiny_config().results_dir)
    seq, stacked = _rows(out / "seq" / "adaptation.csv"), _rows(out / "stacked" / "adaptation.csv")
    keys = ("method", "family", "split", "task", "seed", "budget", "env_steps", "episodes")
    assert [[r[k] for k in keys] for r in seq] == [[r[k] for k in keys] for r in stacked]
    assert {r["budget"] for r in seq} == {"0", "1", "2"}
    for a, b in zip(seq, stacked, strict=True):
        if a["budget"] == "0":  # the starts themselves, acted by stacked products (measured
            # together): the episodes end alike, the shaped rewards move in their last bits
            assert a["success"] == b["success"]
            assert float(a["mean_reward"]) == pytest.approx(float(b["mean_reward"]), abs=1e-6)
        # weights within 1e-5 of each other give the same episodes but where an action rounds
        # across a clip or a goal's edge: the mean reward is the same to a few 1e-3
        assert float(a["mean_reward"]) == pytest.approx(float(b["mean_reward"]), abs=0.05)


def test_with_workers_the_joint_pretrainings_train_side_by_side_to_the_same_bits(
    tiny_config: Factory,
) -> None:
    train(tiny_config("meta.steps=1"), "run")
    joints = "eval.joint_ppo=[{},{optimizer:adam,learning_rate:0.0003}]"
    both = ["run_id=run", *TINY_EVAL, joints]
    out = Path(tiny_config().results_dir)
    brains = {}
    for workers in (1, 2):
        where = f"eval.out_dir=${{results_dir}}/{workers}"
        cfg = tiny_config(*both, f"eval.workers={workers}", where)
        evaluate(plan_eval(cfg, "run"))
        found = sorted((out / "run" / "eval").glob("joint*/Brain.pt"))
        assert len(found) == 2
        brains[workers] = {p.parent.name: p.read_bytes() for p in found}
        for p in found:  # trained again by the next evaluation
            shutil.rmtree(p.parent)
    assert brains[1] == brains[2]
    rows = [_rows(out / str(w) / "adaptation.csv") for w in (1, 2)]
    assert rows[0] == rows[1]


STACKED_TOLERANCE = 1e-5
"""max |Δ| over the weights, as tests/algorithm/test_stacks.py allows the batched products."""


def test_a_linear_schedule_adapts_stacked_as_alone(tiny_config: Factory) -> None:
    cfg = tiny_config(*TINY_EVAL, "eval.budgets=[0,1,3]")
    setting = Setting(cfg, cfg.eval, seed=0)
    tasks = sample_tasks(setting, parse_environment_parameters({}, [BEHAVIOR_NAME]))
    linear = Procedure(learning_rate=0.01, learning_rate_schedule="linear")
    jobs = [
        AdaptJob(setting, task, "scratch", None, seed, procedure=linear)
        for task in (tasks["FindTarget", "test"][0], tasks["CarryObject", "test"][0])
        for seed in range(2)
    ]
    requests = [job.request() for job in jobs]
    assert all(r.ppo.learning_rate_schedule == "linear" for r in requests)
    assert all(stack_key(requests[0]) == stack_key(r) for r in requests)
    pool = EnvPool(cfg.env)

    def envs() -> list:  # type: ignore[type-arg]
        return [pool.env(r.tasks[0].family, r.tasks[0].params, r.seed) for r in requests]

    alone = [train_alone(r, env) for r, env in zip(requests, envs(), strict=True)]
    stacked = train_requests(requests, envs())

    def delta(x: dict, y: dict) -> float:  # type: ignore[type-arg]
        return max(float((x[k] - y[k]).abs().max()) for k in x)

    for a, s in zip(alone, stacked, strict=True):
        assert delta(a.weights, a.snapshots[0]) > 100 * STACKED_TOLERANCE  # it did train
        assert delta(a.weights, s.weights) < STACKED_TOLERANCE
        rates = [u[LEARNING_RATE] for u in s.updates]
        assert rates == [u[LEARNING_RATE] for u in a.updates]  # each member's own schedule
        assert rates[-1] < rates[0] == pytest.approx(0.01)
        assert sorted(s.snapshots) == [0, 1, 3]


def test_joint_pretrainings_of_several_seeds_train_as_one_group_to_rounding(
    tiny_config: Factory,
) -> None:
    for seed in (0, 1, 2):
        train(tiny_config("meta.steps=1", f"seed={seed}"), f"s{seed}")
    out = Path(tiny_config().results_dir)
    weights, configs = {}, {}
    for grouped, ids in (("false", [["s0"], ["s1"], ["s2"]]), ("true", [["s0", "s1", "s2"]])):
        for run_ids in ids:  # each run alone pretrains its baseline alone, in this process
            runs = [f"run_id={run_ids[0]}", *TINY_MEASURE, f"eval.run_ids=[{','.join(run_ids)}]"]
            where = f"eval.out_dir=${{results_dir}}/{grouped}{run_ids[0]}"
            workers = f"eval.workers={2 if grouped == 'true' else 1}"  # the group in a worker
            evaluate(plan_eval(tiny_config(*runs, workers, where), run_ids[0]))
        found = sorted(out.glob("s*/eval/joint"))
        assert len(found) == 3
        weights[grouped] = [torch.load(d / f"{BEHAVIOR_NAME}.pt") for d in found]
        configs[grouped] = [(d / "configuration.yaml").read_text() for d in found]
        for d in found:  # trained again by the next evaluation
            shutil.rmtree(d)
    assert configs["false"] == configs["true"]  # each run of the group as if trained alone
    deltas = [
        max(float((a[k] - b[k]).abs().max()) for k in a)
        for a, b in zip(weights["false"], weights["true"], strict=True)
    ]
    assert 0 < max(deltas) < STACKED_TOLERANCE  # stacked: the batched products round otherwise
    apart = [
        (weights["true"][0][k] - weights["true"][1][k]).abs().max() for k in weights["true"][0]
    ]
    assert max(float(d) for d in apart) > 100 * STACKED_TOLERANCE  # each seed its own run
