"""`python experiments/one_ppo_speed.py one|stack|meta HIDDEN THREADS`: one speed figure of the
tree on PYTHONPATH, for comparing the one PPO with the commit before it (c8cc5a0).

`one`: agent-steps/s of one default training; `stack`: of 16 default trainings trained as one
stack; `meta`: meta-steps/min of a meta-step at `meta.meta_batch_size=16` (before the one PPO,
its best path was `runtime=batched`, which this asks for where the tree still has it). Alternate
the two trees, three rounds, and take medians (docs/log.md, "Every runtime trains stacks"):

    git worktree add --detach ../before c8cc5a0
    for round in 1 2 3; do for what in one stack meta; do for h in 64 128; do for t in 1 2; do
      for tree in ../before .; do figure=$(PYTHONPATH=$tree python experiments/one_ppo_speed.py \
        $what $h $t); echo "$round $tree $what $h $t $figure"; done; done; done; done; done
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.request import Task, TrainRequest
from meta.algorithm.training import train
from meta.config import Config, EnvConfig, LoggerConfig, MetaConfig
from meta.runtime.envpool import EnvPool

try:
    from meta.config import RuntimeConfig
    from meta.config.ppo import NetworkConfig, PPOConfig
except ImportError:  # before the configuration floor
    from meta.algorithm.ppo.config import NetworkConfig, PPOConfig  # type: ignore[no-redef]
    from meta.runtime.config import RuntimeConfig  # type: ignore[no-redef]

try:
    from meta.algorithm.ppo.network import policy_for
except ImportError:  # before the one PPO
    from meta.algorithm.ppo.train import policy_for  # type: ignore[attr-defined,no-redef]
try:
    from meta.algorithm.training import train_requests as stack
except ImportError:  # before the one PPO
    from meta.algorithm.stacked.train import train_stacked as stack  # type: ignore[no-redef]

FAMILIES = ("FindTarget", "CarryObject")


def _stacking_backend() -> str:
    """`batched` where the tree still has it (its meta-batches' best path), else `local`."""
    try:
        RuntimeConfig(backend="batched").validate()
    except ValueError:
        return "local"  # every runtime stacks
    return "batched"


def main() -> None:
    """Print the figure the arguments ask for."""
    what, hidden, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    ppo, network = PPOConfig(), NetworkConfig(hidden_units=hidden)
    pool = EnvPool(EnvConfig())
    theta = cpu_weights(policy_for(pool.env("FindTarget", {}, 0), network))
    if what == "one":
        warm = TrainRequest(
            (Task("FindTarget", {}),), theta, 1, PPOConfig(max_steps=10240), network
        )
        train(warm, pool.env("FindTarget", {}, 1))
        request = TrainRequest((Task("FindTarget", {}),), theta, 1, ppo, network)
        env = pool.env("FindTarget", {}, 1)
        started = time.perf_counter()
        result = train(request, env)
        print(f"{result.stats['steps'] / (time.perf_counter() - started):.0f}")
    elif what == "stack":
        requests = [
            TrainRequest((Task(FAMILIES[i % 2], {}),), theta, i, ppo, network) for i in range(16)
        ]
        envs = [pool.env(r.tasks[0].family, {}, r.seed) for r in requests]
        started = time.perf_counter()
        results = stack(requests, envs)
        print(f"{sum(r.stats['steps'] for r in results) / (time.perf_counter() - started):.0f}")
    else:
        from meta.trainer import train as meta_train

        backend = _stacking_backend()
        with tempfile.TemporaryDirectory() as folder:
            cfg = Config(
                run_id="speed",
                results_dir=folder,
                meta=MetaConfig(steps=2, meta_batch_size=16),
                ppo=ppo,
                network=network,
                runtime=RuntimeConfig(backend=backend),
                logger=LoggerConfig(console=False, tensorboard=False),
            )
            run_dir = meta_train(cfg, "speed")
            timers = json.loads((Path(run_dir) / "run_logs" / "timers.json").read_text())
            step = timers["children"]["meta_step"]
            print(f"{60.0 / (step['total'] / step['count']):.2f}")


if __name__ == "__main__":
    main()
