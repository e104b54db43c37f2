"""`ppo=mlagents` as one continuous PPO run, buffers assembled from pieces or from steps.

`meta-train meta=single` trains in chunks, and each chunk starts its environment afresh, so what
an agent had begun before an update never reaches the next buffer there. This trains each seed
as mlagents-learn does: one environment, one collector, 15 buffers' worth of steps (153,600)
with the run's linear schedules, `ppo=mlagents network.normalize=false` at 16 areas and the
task parameters of experiments/mlagents_ppo.py. It prints the mean reward of the episodes
finished in each 10,240 steps (by the steps counted when each finished, as mlagents-learn's
summaries are; those of one buffer spread evenly over its steps) and whether the 5-seed mean
lies inside mlagents-learn's seed band of experiments/mlagents_ppo/curves.csv at every point
from 30k:

    python experiments/mlagents_pieces.py [--seeds 5] [--tasks FindTarget CarryObject]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.pieces import PieceCollector
from meta.algorithm.ppo.rollout import Collector, NullTimers, Rollout
from meta.algorithm.ppo.train import policy_for, run_updates
from meta.cli import CONFIG_DIR, register_configs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlagents_ppo import AREAS, BAND_FROM, BUFFER, BUFFERS, MLAGENTS, ROOT, TASK_PARAMS


def settings(assembly: str):
    """The run's settings as meta-train composes them."""
    overrides = ["ppo=mlagents", "network.normalize=false", f"ppo.buffer_assembly={assembly}"]
    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return OmegaConf.to_object(compose(config_name="config", overrides=overrides))


def curve(task: str, assembly: str, seed: int) -> list[float]:
    """Mean reward of the episodes finished in each 10,240 counted steps."""
    cfg = settings(assembly)
    ppo = type(cfg.ppo)(**{**vars(cfg.ppo), "max_steps": BUFFER * BUFFERS})
    params = dict(p.split(": ") for p in TASK_PARAMS[task].split(", "))
    env = envs.make(task, num_areas=AREAS, seed=seed, **{k: float(v) for k, v in params.items()})
    policy = policy_for(env, cfg.network, seed=seed)
    start = Hyper.of(ppo)
    optimizer = make_optimizer(
        policy, start.learning_rate, ppo.optimizer, ppo.adam_epsilon, ppo.action_scale
    )
    generator = torch.Generator().manual_seed(seed)
    collector = Collector(env, BEHAVIOR_NAME, policy, generator, ppo.time_horizon)
    source = PieceCollector(collector, policy, ppo) if assembly == "pieces" else collector
    counted, finished = 0, []  # (steps counted when it finished, its return)
    collect = source.collect

    def counting(steps: int) -> Rollout:
        nonlocal counted
        seen = len(collector.episodes.returns)
        buffer = collect(steps)
        returns = collector.episodes.returns[seen:]
        # the episodes finished in a buffer, spread evenly over the steps it counted
        m = len(returns)
        finished.extend(
            (counted + (j + 1) * buffer.num_steps / m, r) for j, r in enumerate(returns)
        )
        counted += buffer.num_steps
        return buffer

    source.collect = counting  # type: ignore[method-assign]
    run_updates(
        source,
        policy,
        optimizer,
        ppo,
        lambda s: start.after(ppo, s, ppo.max_steps),
        generator,
        NullTimers(),
    )
    bins: list[list[float]] = [[] for _ in range(BUFFERS)]
    for steps, value in finished:
        bins[min(int((steps - 1) // BUFFER), BUFFERS - 1)].append(value)
    return [float(np.mean(b)) if b else math.nan for b in bins]


def band(task: str) -> list[tuple[float, float]]:
    """mlagents-learn's min..max over seeds at each point, from the committed comparison."""
    values: dict[int, list[float]] = defaultdict(list)
    with (ROOT / "experiments" / "mlagents_ppo" / "curves.csv").open() as f:
        for row in csv.DictReader(f):
            if row["task"] == task and row["trainer"] == MLAGENTS:
                values[int(row["label"])].append(float(row["reward"]))
    return [(min(values[k]), max(values[k])) for k in sorted(values)]


def main() -> None:
    """Train, then print each assembly's mean curve and its band check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--tasks", nargs="+", default=list(TASK_PARAMS), choices=TASK_PARAMS)
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    torch.set_num_threads(1)
    for task in args.tasks:
        limits = band(task)
        for assembly in ("pieces", "steps"):
            mean = np.mean([curve(task, assembly, s) for s in range(1, args.seeds + 1)], axis=0)
            outside = [
                f"{(k + 1) * 10}k ({v:+.3f} vs {lo:+.3f}..{hi:+.3f})"
                for k, (v, (lo, hi)) in enumerate(zip(mean, limits, strict=True))
                if (k + 1) * 10000 >= BAND_FROM and not lo <= v <= hi
            ]
            points = " ".join(f"{v:+.2f}" for v in mean)
            print(f"{task} buffer_assembly={assembly}: {points}")
            print(f"  outside mlagents-learn's band from 30k: {', '.join(outside) or 'none'}")


if __name__ == "__main__":
    main()
