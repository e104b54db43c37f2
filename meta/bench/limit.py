"""The floating-point work of one agent-step of inner PPO, and what torch's GEMMs allow for it.

Per agent-step, collection runs the actor and the critic forward once (batch = num_areas) and
the update runs num_epoch forward and backward passes (batch = batch_size). A forward costs
F = sum of 2*in*out over every linear layer; its backward costs 2F less the first layers'
input gradients (observations need none). The limit is the rate at which a training would run
if it did nothing but those matrix products at the speed torch reaches for their exact shapes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import PolicyStack, policy_for
from meta.algorithm.ppo.rollout import Collector
from meta.algorithm.ppo.train import make_optimizer
from meta.algorithm.ppo.update import ppo_update
from meta.algorithm.ppo.weights import cpu_weights
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.process.compute import torch_threads

Layer = tuple[int, int]


def layers(obs_size: int, action_size: int, network: NetworkConfig) -> list[list[Layer]]:
    """(fan_in, fan_out) of every linear layer: the actor's, then the critic's."""
    hidden = [obs_size] + [network.hidden_units] * network.num_layers
    bodies = list(itertools.pairwise(hidden))
    last = network.hidden_units
    return [[*bodies, (last, action_size)], [*bodies, (last, 1)]]


@dataclass(frozen=True)
class FlopModel:
    """FLOP (multiply and add counted separately) per agent-step, matrix products only."""

    forward: int
    """Actor and critic forward, one sample."""
    first_layers: int
    """The part of `forward` in the first layers (no input gradient needed there)."""
    num_epoch: int

    @property
    def collect(self) -> int:
        """Collection: one forward per agent-step."""
        return self.forward

    @property
    def update(self) -> int:
        """Update: num_epoch x (forward + weight gradients + input gradients)."""
        return self.num_epoch * (3 * self.forward - self.first_layers)

    @property
    def total(self) -> int:
        """Collection and update."""
        return self.collect + self.update


def flop_model(
    obs_size: int, action_size: int, network: NetworkConfig, ppo: PPOConfig
) -> FlopModel:
    """The FLOP model of a network and PPO settings."""
    nets = layers(obs_size, action_size, network)
    forward = sum(2 * i * o for net in nets for i, o in net)
    first = sum(2 * i * o for net in nets for i, o in net[:1])
    return FlopModel(forward, first, ppo.num_epoch)


def _best_seconds(run: Callable[[], object], repeats: int, rounds: int = 5) -> float:
    """Best mean time of `repeats` calls over `rounds` rounds, after a warm-up round."""
    for _ in range(repeats):
        run()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def gemm_seconds(nets: list[list[Layer]], batch: int, backward: bool, repeats: int) -> float:
    """Seconds for one pass of these layers' GEMMs at `batch` (with backward: also both grads)."""
    ops: list[Callable[[], torch.Tensor]] = []
    for net in nets:
        for k, (fan_in, fan_out) in enumerate(net):
            x, w, b = torch.randn(batch, fan_in), torch.randn(fan_out, fan_in), torch.randn(fan_out)
            ops.append(partial(torch.addmm, b, x, w.t()))  # forward, as F.linear runs it
            if backward:
                g = torch.randn(batch, fan_out)
                ops.append(partial(torch.mm, g.t(), x))  # weight gradient
                if k > 0:
                    ops.append(partial(torch.mm, g, w))  # input gradient
    return sum(_best_seconds(op, repeats) for op in ops)


def limits(
    obs_size: int,
    action_size: int,
    network: NetworkConfig,
    ppo: PPOConfig,
    num_areas: int,
    threads: tuple[int, ...] = (1, 2),
    repeats: int = 200,
) -> dict[str, Any]:
    """FLOP per agent-step and, per thread count, GEMM GFLOP/s and the matmul-only step rate."""
    model = flop_model(obs_size, action_size, network, ppo)
    nets = layers(obs_size, action_size, network)
    per_threads: dict[str, Any] = {}
    for n in threads:
        with torch_threads(n):
            collect = gemm_seconds(nets, num_areas, backward=False, repeats=repeats)
            update = gemm_seconds(nets, ppo.batch_size, backward=True, repeats=max(repeats // 8, 5))
        per_threads[str(n)] = {
            "gflops_collect_batch": model.forward * num_areas / collect / 1e9,
            "gflops_update_batch": (model.update / model.num_epoch) * ppo.batch_size / update / 1e9,
            "collect_s_per_step": collect / num_areas,
            "update_s_per_step": update * model.num_epoch / ppo.batch_size,
        }
    return {
        "flop": {
            **asdict(model),
            "collect": model.collect,
            "update": model.update,
            "total": model.total,
        },
        "threads": per_threads,
    }


def limit_rate(limit: dict[str, Any], collect_threads: int, update_threads: int) -> float:
    """Agent-steps/s if a training did only its GEMMs, collecting and updating on these threads.

    An update on n threads is credited with the faster of torch's n-thread GEMMs and n
    single-threaded streams side by side (what the actor and critic halves can do at best).
    """
    per = limit["threads"]
    update = per[str(update_threads)]["update_s_per_step"]
    if "1" in per:
        update = min(update, per["1"]["update_s_per_step"] / update_threads)
    return 1.0 / (per[str(collect_threads)]["collect_s_per_step"] + update)


def phase_rates(
    task: str,
    num_areas: int,
    network: NetworkConfig,
    ppo: PPOConfig,
    collect_threads: int,
    update_threads: int,
    halves: bool,
    buffers: int = 3,
) -> dict[str, float]:
    """Agent-steps/s of collection alone and of the update alone (best buffer of `buffers`).

    The update runs on `update_threads` torch threads, with the actor's and the critic's halves
    of each step side by side (`halves`, each on one thread) or one after the other.
    """
    env = envs.make(task, num_areas=num_areas, seed=0)
    weights = cpu_weights(policy_for(env, network, seed=0))
    policy = PolicyStack([weights], network.normalize, network.normalizer_epsilon, "cpu")
    generator = torch.Generator().manual_seed(0)
    collector = Collector(
        env, BEHAVIOR_NAME, policy.member(0), generator, ppo.time_horizon, None, collect_threads
    )
    optimizer = make_optimizer(policy, ppo)
    worker = ThreadPoolExecutor(1) if halves else None
    horizon = max(ppo.buffer_size // num_areas, 1)
    collect = update = float("inf")
    for k in range(buffers + 1):
        start = time.perf_counter()
        rollout = collector.collect(horizon)
        middle = time.perf_counter()
        with torch_threads(update_threads):
            ppo_update(policy, optimizer, [rollout], ppo, [Hyper.of(ppo)], [generator], worker)
        if k > 0:  # the first buffer warms up; other load only slows a buffer down: keep the best
            collect = min(collect, middle - start)
            update = min(update, time.perf_counter() - middle)
    if worker is not None:
        worker.shutdown()
    env.close()
    steps = horizon * num_areas
    return {"collect": steps / collect, "update": steps / update}
