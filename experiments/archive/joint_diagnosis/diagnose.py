"""Why a joint start does not adapt: its statistics and its first updates on held-out tasks.

Usage: python experiments/joint_diagnosis/diagnose.py RESULTS_DIR JOINT_RUN_ID [wide]
Prints, per held-out FindTarget task, the start's normaliser against the task's observations,
how saturated its action means are, and for each procedure (resets among them) the first
update's value loss and explained variance and the success after 4, 8 and 16 updates of 512.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.network import PolicyStack, policy_with
from meta.algorithm.ppo.rollout import NullTimers
from meta.config.evaluation import EvalConfig, Procedure
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.adapt import AdaptJob, Setting, measured
from meta.evaluation.runs import load_run
from meta.evaluation.tasks import sample_tasks
from meta.observe.tags import EXPLAINED_VARIANCE, VALUE_LOSS
from meta.run.directory import latest_weights
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import run_request

PROCEDURES = [
    Procedure(learning_rate=0.003),
    Procedure(learning_rate=0.003, log_std=0.0),
    Procedure(learning_rate=0.003, reset=["value_head"]),
    Procedure(learning_rate=0.003, reset=["normalizer"]),
    Procedure(learning_rate=0.003, reset=["value_head", "normalizer"]),
    Procedure(learning_rate=0.003, reset=["value_head", "policy_head", "normalizer"]),
]
HEADS = ([], ["value_head"], ["critic"], ["policy_head"], ["value_head", "policy_head"])
WIDE = [  # the rates that move each optimizer (the run's SGD 0.1, Adam), each head reset
    Procedure(optimizer=optimizer, learning_rate=lr, reset=list(reset))
    for optimizer, lr in (("sgd", 0.1), ("adam", 0.003), ("adam", 0.01))
    for reset in HEADS
]
"""`diagnose.py RESULTS RUN wide`: these, to 32 updates of 512 (scratch at Adam 3e-3)."""


def main(results_dir: str, run_id: str, which: str = "first") -> None:
    _, run = load_run(results_dir, run_id)
    weights = latest_weights(results_dir, run_id)
    wide = which == "wide"
    budgets = [0, 4, 8, 16, 32] if wide else [0, 4, 8, 16]
    ev = EvalConfig(budgets=budgets, buffer_size=512, seeds=2, tasks_per_family=2)
    scratch = Procedure(optimizer="adam" if wide else None, learning_rate=0.003)
    ev.eval_episodes = 32
    setting = Setting(run, ev, seed=0)
    tasks = sample_tasks(setting, parse_environment_parameters({}, [BEHAVIOR_NAME]))
    pool = EnvPool(run.env)
    policy = policy_with(weights, run.network)
    print(
        f"start: log_std {policy.log_std.detach().numpy().round(2)}, "
        f"normaliser count {float(policy.normalizer.count):.0f}"
    )
    for task in tasks["FindTarget", "test"]:
        env = pool.env("FindTarget", task.task.params, 0, 64)
        env.reset()
        obs = torch.from_numpy(env.get_steps(BEHAVIOR_NAME)[0].obs[0])
        pool.release(env)
        network = run.network
        stack = PolicyStack([weights], network.normalize, network.normalizer_epsilon, "cpu")
        with torch.no_grad():
            z = stack.features(obs[None])
            mean, value, z = stack.mean_from(z)[0], stack.value_from(z)[0], z[0]
        print(f"task {task.index} {task.task.params_json()}")
        sd = policy.normalizer.var.sqrt().numpy().round(2)
        print(f"  obs mean {obs.mean(0).numpy().round(2)}  obs sd {obs.std(0).numpy().round(2)}")
        print(f"  start normaliser mean {policy.normalizer.mean.numpy().round(2)} sd {sd}")
        print(
            f"  |z| > 4: {float((z.abs() > 4).float().mean()):.3f}; action |mean| "
            f"{float(mean.abs().mean()):.2f}, "
            f"> 1 (clipped): {float((mean.abs() > 1).float().mean()):.2f}; "
            f"value {float(value.mean()):.2f} +- {float(value.std()):.2f}"
        )
        for procedure in [None, *(WIDE if wide else PROCEDURES)]:
            rows, first = [], []
            for seed in range(ev.seeds):
                job = AdaptJob(
                    setting,
                    task,
                    "joint" if procedure else "scratch",
                    weights if procedure else None,
                    seed,
                    procedure=procedure or scratch,
                )
                result = run_request(job.request(), pool, NullTimers())
                first.append(result.updates[0])
                rows += measured(pool, job, result)
            success = {b: np.mean([r.success for r in rows if r.budget == b]) for b in ev.budgets}
            name = "scratch" if procedure is None else setting.label(procedure)
            print(
                f"  {name:58s} value_loss {np.mean([f[VALUE_LOSS] for f in first]):7.3f} "
                f"expl_var {np.mean([f[EXPLAINED_VARIANCE] for f in first]):6.2f} "
                f"success {' '.join(f'{success[b]:.2f}' for b in ev.budgets)}"
            )


if __name__ == "__main__":
    main(*sys.argv[1:4])
