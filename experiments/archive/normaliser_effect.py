"""`python experiments/normaliser_effect.py`: scratch's first updates, values stale or revalued.

A fresh start on held-out hidden-goal tasks (experiment=hidden_goal's network and PPO), trained
for a few updates twice from the same seeds: with the values from acting (estimated before the
normaliser saw the buffer, as the harness did) and with the values estimated again after the
normaliser's update (as ML-Agents does, and the harness now does). Prints, per update, how far
the two value estimates lie apart, the correlation of the advantages computed from them, the
explained variance of each, and the success of the trained policy after the last update.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import PolicyStack, policy_for, policy_with
from meta.algorithm.ppo.rollout import Collector, Rollout
from meta.algorithm.ppo.train import make_optimizer
from meta.algorithm.ppo.update import compute_gae, explained_variance, ppo_update, revalued
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.reptile import TaskSampler
from meta.cli import register_configs
from meta.config import Config, TaskConfig
from meta.evaluation.episodes import policy_actor, run_episodes


def config(overrides: list[str]) -> Config:
    """experiment=hidden_goal composed as meta-train composes it."""
    register_configs()
    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=hidden_goal", *overrides])
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def advantages(r: Rollout, cfg: Config) -> torch.Tensor:
    """GAE advantages of a rollout."""
    adv, _ = compute_gae(
        r.rewards, r.values, r.next_values, r.boundaries, cfg.ppo.gamma, cfg.ppo.lambd
    )  # type: ignore[attr-defined]
    return adv


def one(
    cfg: Config, task: TaskConfig, params: dict[str, float], seed: int, fix: bool, updates: int
) -> dict[str, list[float]]:
    """`updates` updates of a fresh start; per-update statistics and the final success."""
    env = envs.make(task.name, num_areas=cfg.env.num_areas, seed=seed, **params)
    start = cpu_weights(policy_for(env, cfg.network, seed=seed))
    policy = PolicyStack([start], cfg.network.normalize, cfg.network.normalizer_epsilon, "cpu")
    ppo = replace(
        cfg.ppo,
        learning_rate_schedule="constant",
        beta_schedule="constant",
        epsilon_schedule="constant",
    )
    optimizer = make_optimizer(policy, ppo)
    generator = torch.Generator().manual_seed(seed)
    collector = Collector(env, BEHAVIOR_NAME, policy.member(0), generator, ppo.time_horizon)
    out: dict[str, list[float]] = {"gap": [], "corr": [], "ev_stale": [], "ev_fresh": []}
    for _ in range(updates):
        rollout = collector.collect(math.ceil(ppo.buffer_size / collector.num_agents))
        policy.update_normalizer(rollout.obs.reshape(1, rollout.num_steps, -1), 0)
        (fresh,) = revalued(policy, [rollout])
        stale_adv, fresh_adv = advantages(rollout, cfg).ravel(), advantages(fresh, cfg).ravel()
        _, ret_fresh = compute_gae(
            fresh.rewards, fresh.values, fresh.next_values, fresh.boundaries, ppo.gamma, ppo.lambd
        )
        out["gap"].append(float((rollout.values - fresh.values).abs().mean()))
        out["corr"].append(float(np.corrcoef(stale_adv.numpy(), fresh_adv.numpy())[0, 1]))
        out["ev_stale"].append(explained_variance(rollout.values, ret_fresh))
        out["ev_fresh"].append(explained_variance(fresh.values, ret_fresh))
        ppo_update(
            policy, optimizer, [fresh if fix else rollout], ppo, [Hyper.of(ppo)], [generator]
        )
    measure = envs.make(task.name, num_areas=cfg.env.num_areas, seed=seed + 10_000, **params)
    trained = policy_with(policy.weights(0), cfg.network)
    act = policy_actor(trained, True, torch.Generator().manual_seed(seed))
    out["success"] = [run_episodes(measure, act, 64)[1]]
    return out


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. ppo.optimizer=adam")
    options = parser.parse_args()
    cfg = config(options.overrides)
    task = cfg.meta.tasks[0]
    sampler = TaskSampler([task], "test")
    rng = np.random.default_rng(0)
    tasks = [sampler.sample(rng).params for _ in range(options.tasks)]
    ppo = cfg.ppo
    print(f"{options.tasks} held-out tasks, {options.updates} updates of {ppo.buffer_size} steps,")
    print(f"{ppo.optimizer} lr={ppo.learning_rate:g}; per update: mean |V_stale - V_fresh|,")
    print("corr(A_stale, A_fresh), explained variance of V_stale and of V_fresh")
    for fix in (False, True):
        runs = [one(cfg, task, p, seed, fix, options.updates) for seed, p in enumerate(tasks)]
        mean = {k: np.mean([r[k] for r in runs], axis=0) for k in runs[0]}
        print("\n" + ("trained on revalued values" if fix else "trained on stale values"))
        for u in range(options.updates):
            row = [mean[k][u] for k in ("gap", "corr", "ev_stale", "ev_fresh")]
            print(f"  {u + 1}  " + "  ".join(f"{v:.4f}" for v in row))
        print(f"  success after {options.updates} updates: {mean['success'][0]:.3f}")


if __name__ == "__main__":
    main()
