"""`python experiments/ray_bench.py`: meta-steps per minute in-process and on Ray, and Ray's cost.

Times meta-train's meta-steps (meta.meta_batch_size=4 by default, everything else meta-train's
defaults, native tasks) with runtime=local and with runtime=ray on 1 and 2 actors, after one
untimed meta-step each (actors start, caches warm). The modes take turns, one meta-step each,
and each reports its best meta-step, since other load only ever slows one down. Then the
executor's own cost on the driver, without training: putting θ in the object store, one round
trip per job carrying θ out and an inner training's result back, and Reptile's average over the
results, for larger meta-batches and more actors, with a linear fit and what it predicts for 64
nodes. It prints figures and asserts nothing; read them with the load average it prints.

    python experiments/ray_bench.py                               # ~1 min on 2 cores
    python experiments/ray_bench.py --meta-steps 1 experiment=tiny     # a quick look
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from typing import Any

import ray
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from meta.algorithm import reptile
from meta.algorithm.request import TrainResult
from meta.cli import CONFIG_DIR, register_configs
from meta.config import Config
from meta.runtime.actors import Arrays, to_numpy, to_torch
from meta.trainer import MetaTrainer, plan_training

MODES = {"local": [], "ray, 1 actor": ["runtime=ray", "runtime.num_actors=1"]}
MODES["ray, 2 actors"] = ["runtime=ray", "runtime.num_actors=2"]
BATCHES = (4, 16, 64, 128)


def config(overrides: list[str]) -> Config:
    """meta-train's configuration with these overrides, as meta-train composes it."""
    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def time_modes_interleaved(overrides: list[str], meta_steps: int, results: str) -> dict[str, float]:
    """Best wall seconds of a meta-step per mode; the modes take turns, one meta-step each.

    Taking turns spreads other processes' load over every mode alike, and the best of the
    rounds is the least disturbed one (other load only ever slows a meta-step down).
    """
    trainers = {}
    try:
        for index, (name, extra) in enumerate(MODES.items()):
            steps = f"meta.steps={meta_steps + 1}"
            run = [*overrides, steps, *extra, f"results_dir={results}/{index}", "logger=quiet"]
            trainers[name] = MetaTrainer(plan_training(config(run), "bench"), "{}", {})
            trainers[name].meta_step_once(0)  # untimed: actors start, caches warm
        walls: dict[str, list[float]] = {name: [] for name in MODES}
        for k in range(1, meta_steps + 1):
            for name, trainer in trainers.items():
                started = time.perf_counter()
                trainer.meta_step_once(k)
                walls[name].append(time.perf_counter() - started)
    finally:
        for trainer in trainers.values():
            trainer.close()
    return {name: min(times) for name, times in walls.items()}


@ray.remote
class Echo:
    """Stands in for an actor: takes θ by reference, returns what a real actor returns."""

    def __init__(self, result: TrainResult) -> None:
        self.packed = (replace(result, weights={}), to_numpy(result.weights))

    def run(self, theta: Arrays, job: int) -> tuple[TrainResult, Arrays]:
        """The canned result (θ resolved from the object store as the real actor's is)."""
        return self.packed


def overhead(
    theta: dict[str, torch.Tensor], result: TrainResult, batch: int, actors: int
) -> dict[str, float]:
    """Driver-side milliseconds of one meta-step's executor work and outer update, no training."""
    echoes = [Echo.options(num_cpus=0).remote(result) for _ in range(actors)]
    ray.get([e.run.remote(to_numpy(theta), 0) for e in echoes])  # started
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        ref = ray.put(to_numpy(theta))
        put = time.perf_counter() - started
        packed = ray.get([echoes[i % actors].run.remote(ref, i) for i in range(batch)])
        phis = [to_torch(weights) for _, weights in packed]
        trip = time.perf_counter() - started - put
        update_start = time.perf_counter()
        reptile.reptile_update(theta, phis, 0.5)
        update = time.perf_counter() - update_start
        samples.append((put, trip, update))
    for echo in echoes:
        ray.kill(echo)
    put, trip, update = (statistics.median(s[i] for s in samples) for i in range(3))
    return {"put_ms": put * 1e3, "round_trips_ms": trip * 1e3, "outer_update_ms": update * 1e3}


def payload(overrides: list[str], results: str) -> tuple[dict[str, torch.Tensor], TrainResult]:
    """θ and one real inner training's result, at the benchmark's settings."""
    cfg = config([*overrides, f"results_dir={results}", "logger=quiet"])
    trainer = MetaTrainer(plan_training(cfg, "payload"), "{}", {})
    try:
        rng = reptile.task_rng(cfg.seed, 0)
        tasks = trainer.learner.tasks(trainer.plan.sampler, rng, {})
        hyper = reptile.inner_hyper(cfg.ppo, cfg.meta, 0)
        (result,) = trainer.inner.train(0, trainer.theta, tasks[:1], hyper)
        return trainer.theta, result
    finally:
        trainer.close()


def time_modes(overrides: list[str], meta_steps: int) -> tuple[dict[str, float], Any, Any]:
    """Best meta-step wall per mode, printed; θ and a real result for the cost measurements."""
    with tempfile.TemporaryDirectory() as results:
        walls = time_modes_interleaved(overrides, meta_steps, results)
        theta, result = payload(overrides, f"{results}/payload")
    for name, wall in walls.items():
        print(
            f"{name:>14}: {60 / wall:7.2f} meta-steps/min ({wall:.2f} s each, best of {meta_steps})"
        )
    local = walls["local"]
    for name in list(MODES)[1:]:
        print(f"speed-up, {name} over local: {local / walls[name]:.2f}x")
    two = local / walls["ray, 2 actors"]
    print(f"scaling efficiency, 2 actors: {two / 2:.0%} of 2x local; ", end="")
    print(f"2 actors over 1: {walls['ray, 1 actor'] / walls['ray, 2 actors']:.2f}x")
    gap = walls["ray, 1 actor"] - local
    print(f"ray on 1 actor minus local: {gap * 1e3:+.0f} ms per meta-step ({gap / local:+.1%})")
    return walls, theta, result


def costs(theta: dict[str, torch.Tensor], result: TrainResult, local: float) -> None:
    """The executor's cost on the driver by meta-batch and actors, and a 64-node estimate."""
    size = sum(v.numel() * v.element_size() for v in theta.values())
    print(f"executor's own cost on the driver (θ {size / 1024:.0f} KiB; no training):")
    totals: dict[int, float] = {}
    for batch in BATCHES:
        for actors in (1, 2):
            cost = overhead(theta, result, batch, actors)
            total = sum(cost.values())
            totals[batch] = total
            print(
                f"  meta_batch {batch:>3}, {actors} actors: put {cost['put_ms']:.2f} ms, "
                f"round trips {cost['round_trips_ms']:.1f} ms, outer update "
                f"{cost['outer_update_ms']:.1f} ms = {total:.1f} ms ({total / 1e3 / local:.2%} "
                "of a local meta-step)"
            )
    xs, ys = list(totals), list(totals.values())
    slope = statistics.linear_regression(xs, ys).slope
    fixed = statistics.fmean(ys) - slope * statistics.fmean(xs)
    print(f"fit (2 actors): {fixed:.1f} ms + {slope:.2f} ms per job per meta-step")
    for nodes, per_node in ((64, 2), (64, 16)):
        jobs = nodes * per_node
        print(
            f"  {nodes} nodes x {per_node} actors, meta_batch_size={jobs}: about "
            f"{fixed + slope * jobs:.0f} ms of driver time per meta-step"
        )


def main() -> None:
    """Time the modes, then the executor's own cost; print both with the load average."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--meta-steps", type=int, default=8, help="timed meta-steps per mode")
    parser.add_argument(
        "overrides", nargs="*", help="meta-train overrides (meta.meta_batch_size=4 first)"
    )
    options = parser.parse_args()
    overrides = ["meta.meta_batch_size=4", *options.overrides]
    print(f"load average before: {os.getloadavg()}; cpus: {os.cpu_count()}; overrides: {overrides}")
    torch.set_num_threads(config(overrides).torch_threads)  # as meta-train sets it
    # logical CPUs for every mode's actors at once (1 + 2): the modes take turns, never overlap
    ray.init(num_cpus=3, include_dashboard=False, logging_level="ERROR")
    try:
        walls, theta, result = time_modes(overrides, options.meta_steps)
        costs(theta, result, walls["local"])
    finally:
        ray.shutdown()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
