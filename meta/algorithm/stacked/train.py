"""k training requests in lockstep: one stacked policy acts for all k, one update for all.

Each member keeps its own environment, random stream (its request's seed: the same
minibatch orders and action noise as alone), losses, gradient-norm clip, learning rate, beta
and epsilon schedules, Adam state and normaliser. Built-in tasks of one family step as one
core over all the members' areas (meta.algorithm.stacked.collect), other environments one
after the other; every forward, backward and optimizer step is one for all k.

What it gives equals the sequential runner's (meta.algorithm.training) up to rounding: the
batched matrix products and the optimizer's arithmetic round differently from `addmm` and the
fused Adam kernel, and a rounding difference grows over a training as any perturbation does
(tests/algorithm/test_stacked.py measures it). Requests it cannot stack run alone: see
`stackable`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial

import torch

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from envs.tasks.stack import stackable_envs
from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.policy import Policy
from meta.algorithm.ppo.rollout import Collector, NullTimers, Rollout, Timers
from meta.algorithm.ppo.train import SuccessLog, buffer_stats, summary
from meta.algorithm.ppo.weights import OptimizerState, Weights, cpu_weights, optimizer_cpu_state
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.stacked.collect import StackedCollection
from meta.algorithm.stacked.network import StackedPolicy
from meta.algorithm.stacked.optim import StackedOptimizer, optimizer_steps
from meta.algorithm.stacked.update import stacked_update
from meta.algorithm.training import _with_meta_gradient, start_policy
from meta.runtime.allocator import keep_freed_memory


def stackable(request: TrainRequest) -> str | None:
    """Why the request trains alone (None: it can be stacked)."""
    if request.ppo.self_play is not None:
        return "a game of teams trains with the ghost trainer"
    if request.ppo.ratio == "per_dimension":
        return "ppo.ratio=per_dimension"
    if request.ppo.buffer_assembly == "pieces":
        return "ppo.buffer_assembly=pieces"
    return None


def same_shape(a: TrainRequest, b: TrainRequest) -> bool:
    """Whether two stackable requests can train in one stack: the same settings, device and
    number of tasks side by side, and optimizers continued at the same step."""
    return _shape(a) == _shape(b)


def _shape(r: TrainRequest) -> tuple[object, ...]:
    """What requests of one stack share."""
    return (r.ppo, r.network, r.device, r.updates, len(r.tasks), optimizer_steps(r.optimizer_state))


def train_stacked(
    requests: Sequence[TrainRequest],
    envs: Sequence[AgentEnvironment],
    timers: Timers | None = None,
    merge: bool = True,
    compiled: bool = False,
) -> list[TrainResult]:
    """Train every request on its environment, all k in lockstep; results in order.

    `merge`: built-in tasks of one family step as one core over all their areas (the same
    numbers as each environment stepped by itself, which False does). `compiled`
    (runtime.compile): the update's losses and backward as torch.compile's fused kernels.
    """
    keep_freed_memory()
    started = time.perf_counter()
    timers = timers or NullTimers()
    first = requests[0]
    cfg, network, device = first.ppo, first.network, first.device
    cfg.validate()
    head = start_policy(first, envs[0])
    layout = cpu_weights(head)
    rest = zip(requests[1:], envs[1:], strict=True)
    weights = [layout, *(_start_weights(r, e, layout) for r, e in rest)]
    *_, mean_layer = (m for m in head.actor if isinstance(m, torch.nn.Linear))
    policy = StackedPolicy(weights, network.normalize, network.normalizer_epsilon, device)
    scaled = [policy.params[f"actor.{_index(head, mean_layer)}.{n}"] for n in ("weight", "bias")]
    optimizer = StackedOptimizer(
        policy.parameters(), cfg.optimizer, cfg.adam_epsilon, scaled, cfg.action_scale
    )
    optimizer.load([r.optimizer_state for r in requests])
    generators = [torch.Generator().manual_seed(r.seed) for r in requests]
    channels = [getattr(env, "stats_channel", None) for env in envs]
    for channel in channels:
        if channel is not None:
            channel.get_and_reset_stats()
    successes = [SuccessLog(channel) for channel in channels]
    collection: StackedCollection | list[Collector]
    if merge and stackable_envs(envs):
        collection = StackedCollection(envs, cfg.time_horizon, timers, policy.log_std.device)  # type: ignore[arg-type]
        episodes, agents = collection.episodes, {collection.n}
    else:
        # the stacked policy acts: a collector's own policy only says the device
        collection = [
            Collector(env, BEHAVIOR_NAME, head, g, cfg.time_horizon, timers)
            for env, g in zip(envs, generators, strict=True)
        ]
        episodes, agents = [c.episodes for c in collection], {c.num_agents for c in collection}
    if len(agents) != 1:
        raise ValueError("stacked trainings need the same number of agents in every environment")
    schedules = [_schedule(r) for r in requests]
    current = [schedule(0) for schedule in schedules]
    horizon = max(-(-cfg.buffer_size // agents.pop()), 1)
    histories: list[list[dict[str, float]]] = [[] for _ in requests]
    snapshots: list[dict[int, dict[str, torch.Tensor]]] = [
        {0: policy.weights(i)} if 0 in r.snapshots else {} for i, r in enumerate(requests)
    ]
    steps = 0
    while steps < cfg.max_steps if first.updates is None else len(histories[0]) < first.updates:
        current = [schedule(steps) for schedule in schedules]
        before = [len(e.returns) for e in episodes]
        rollouts = _collect(policy, collection, generators, horizon, timers)
        steps += rollouts[0].num_steps
        if cfg.schedule_timing == "after_buffer":
            current = [schedule(steps) for schedule in schedules]
        with timers.scope("update"):
            updates = stacked_update(
                policy, optimizer, rollouts, cfg, current, generators, compiled
            )
        for i, update in enumerate(updates):
            update.update(buffer_stats(episodes[i], before[i], steps, successes[i]))
            histories[i].append(update)
            if len(histories[i]) in requests[i].snapshots:
                snapshots[i][len(histories[i])] = policy.weights(i)
    if isinstance(collection, StackedCollection):
        collection.release()
    wall = time.perf_counter() - started
    results = []
    for i, request in enumerate(requests):
        success = successes[i].overall()
        stats = summary(histories[i], episodes[i], success, steps, wall)
        kept = None
        if request.returns_optimizer:
            kept = _optimizer_state(head, cfg, optimizer, i, current[i])
        result = TrainResult(policy.weights(i), stats, histories[i], kept, snapshots=snapshots[i])
        if request.meta_gradient:
            with timers.scope("meta_gradient"):
                result = _with_meta_gradient(request, envs[i], result)
        results.append(result)
    return results


def _schedule(request: TrainRequest) -> Callable[[int], Hyper]:
    """The request's learning rate, beta and epsilon after a number of its agent-steps."""
    if request.schedule is not None:
        return request.schedule.at
    cfg, start = request.ppo, request.hyper or Hyper.of(request.ppo)
    return lambda steps: start.after(cfg, steps, cfg.max_steps)


def _optimizer_state(
    head: Policy, cfg: PPOConfig, optimizer: StackedOptimizer, i: int, last: Hyper
) -> OptimizerState:
    """Member i's optimizer as the sequential runner gives it back: torch.optim's state_dict
    over a policy's parameters, its learning rate the last update's."""
    rate = last.learning_rate
    alone = make_optimizer(head, rate, cfg.optimizer, cfg.adam_epsilon, cfg.action_scale)
    if slots := optimizer.member_slots(i):
        alone.state = dict(zip(alone.params, slots, strict=True))
    return optimizer_cpu_state(alone)


def _start_weights(request: TrainRequest, env: AgentEnvironment, layout: Weights) -> Weights:
    """The request's start weights: its own when it resets nothing (no module to build)."""
    given = request.weights
    if (
        given is None
        or request.reset
        or request.log_std is not None
        or given.keys() != layout.keys()
        or any(given[k].dtype != v.dtype or given[k].shape != v.shape for k, v in layout.items())
    ):
        return cpu_weights(start_policy(request, env))
    return {key: given[key] for key in layout}


def _index(policy: torch.nn.Module, layer: torch.nn.Module) -> str:
    """The name of `layer` within the policy's actor."""
    return next(name for name, m in policy.actor.named_children() if m is layer)  # type: ignore[union-attr]


def _collect(
    policy: StackedPolicy,
    collection: StackedCollection | list[Collector],
    generators: list[torch.Generator],
    steps: int,
    timers: Timers,
) -> list[Rollout]:
    """One buffer of every member, the stacked policy acting for all at each step."""
    values_of = [partial(policy.member_value, i) for i in range(policy.k)]
    if isinstance(collection, StackedCollection):
        return collection.collect(steps, lambda obs: policy.act(obs, generators), values_of)
    collectors = collection
    stepping = [c.stepping(steps, v) for c, v in zip(collectors, values_of, strict=True)]
    obs = [next(s) for s in stepping]
    rollouts: list[Rollout] = []
    device = collectors[0].device
    while not rollouts:
        with timers.scope("policy_forward"):
            actions, log_probs, values = policy.act(torch.stack(obs).to(device), generators)
        for i, s in enumerate(stepping):
            try:
                obs[i] = s.send((actions[i], log_probs[i], values[i]))
            except StopIteration as done:
                rollouts.append(done.value)
    return rollouts
