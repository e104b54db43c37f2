"""The inner PPO with ML-Agents semantics: k trainings in lockstep; one training is k = 1.

Each member keeps its own environment, random stream, schedules, Adam state and normaliser; a
game and buffers assembled from pieces step by the member's own collector.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import numpy as np
import torch
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.kernels import update_threads_for
from meta.algorithm.ppo.network import PolicyStack
from meta.algorithm.ppo.optim import StackOptimizer
from meta.algorithm.ppo.pieces import PieceCollector, dimension_log_probs
from meta.algorithm.ppo.rollout import (
    AGENT_COUNTS,
    Collection,
    Collector,
    EpisodeLog,
    NullTimers,
    Rollout,
    Timers,
    collection,
)
from meta.algorithm.ppo.update import ppo_update, take_in
from meta.algorithm.ppo.weights import OptimizerState, Weights
from meta.config.ppo import PPOConfig
from meta.observe.tags import CUMULATIVE_REWARD, EPISODE_LENGTH, SUCCESS
from meta.process.compute import keep_freed_memory, torch_threads

STEPS = "steps"
"""An update's agent-steps of its training so far (with the buffer's)."""
Schedule = Callable[[int], Hyper]
"""The learning rate, beta and epsilon after a number of agent-steps of the training."""


Collecting = Collector | PieceCollector
"""A member's own collector: its agents, episodes and buffers."""


class Session(Protocol):
    """A member's collection with what a trainer adds around PPO (a game's ghost)."""

    collector: Collector
    """What steps the member's environment."""

    def updated(self) -> None:
        """The member's weights changed (after an update)."""

    def finish(self, stats: dict[str, float], steps: int) -> object:
        """Complete the member's statistics in place; the state it leaves (None: none)."""


SessionFor = Callable[[int, PolicyStack, torch.Generator], Session | None]
"""A member's session, or None for PPO's own collector; told the member's index, its policy
and its random stream."""


@dataclass
class Stack:
    """What the stack's trainings share and what each member is given."""

    starts: Sequence[Weights]
    """Each member's start weights."""
    cfg: PPOConfig
    """The first member's settings: every member's but those each takes from its own schedule
    and session (meta.algorithm.training.PER_MEMBER)."""
    normalize: bool
    normalizer_epsilon: float
    device: str
    seeds: Sequence[int]
    schedules: Sequence[Schedule]
    optimizer_states: Sequence[OptimizerState | None]
    updates: int | None = None
    """Stop after this many updates (None: at cfg.max_steps agent-steps)."""
    snapshots: Sequence[tuple[int, ...]] = ()
    """Per member, the updates after which to keep its weights (0: the start)."""
    timers: Timers = field(default_factory=NullTimers)
    compiled: bool = False
    """The update's losses and backward as torch.compile's kernels (runtime.compile)."""


@dataclass
class Trained:
    """One member's training: weights, statistics, updates, and what it leaves."""

    weights: Weights
    stats: dict[str, float]
    updates: list[dict[str, float]]
    optimizer: StackOptimizer
    last: Hyper
    left: object = None
    snapshots: dict[int, Weights] = field(default_factory=dict)

    def optimizer_state(self, i: int) -> OptimizerState:
        """Member i's Adam state as torch.optim's state_dict, at the last update's rate."""
        return self.optimizer.member_state(i, self.last.learning_rate)


def train_stack(
    stack: Stack,
    envs: Sequence[AgentEnvironment],
    session_for: SessionFor | None = None,
    merge: bool = True,
) -> list[Trained]:
    """Train every member on its environment, all k in lockstep; results in order.

    `merge`: built-in tasks of one family step as one core over all their areas (the same
    numbers as each environment stepped by itself, which False does).
    """
    keep_freed_memory()
    started = time.perf_counter()
    cfg, timers, k = stack.cfg, stack.timers, len(envs)
    cfg.validate()
    policy = PolicyStack(stack.starts, stack.normalize, stack.normalizer_epsilon, stack.device)
    optimizer = make_optimizer(policy, cfg)
    optimizer.load(stack.optimizer_states)
    generators = [torch.Generator().manual_seed(seed) for seed in stack.seeds]
    collectors, episodes, sessions, successes, horizon = _collection(
        stack, envs, policy, generators, session_for, merge
    )
    histories: list[list[dict[str, float]]] = [[] for _ in range(k)]
    kept = stack.snapshots or [()] * k
    snapshots = [{0: policy.weights(i)} if 0 in kept[i] else {} for i in range(k)]
    worker, update_threads = update_threads_for(k, policy.device)
    values_of = [partial(policy.member_value, i) for i in range(k)]
    by_pieces = cfg.buffer_assembly == "pieces"
    valued = by_pieces and policy.normalize  # each piece taken in and valued as it completes
    steps = [0] * k
    current = [schedule(0) for schedule in stack.schedules]

    def running(i: int) -> bool:
        return (
            steps[i] < cfg.max_steps if stack.updates is None else len(histories[i]) < stack.updates
        )

    try:
        while any(active := [running(i) for i in range(k)]):
            current = [
                schedule(steps[i]) if active[i] else current[i]
                for i, schedule in enumerate(stack.schedules)
            ]
            before = [len(e.returns) for e in episodes]
            rollouts: list[Rollout | None]
            if isinstance(collectors, Collection):  # their buffers fill alike: all are active
                act = partial(policy.act, generators=generators)
                rollouts = collectors.collect(horizon, act, values_of)  # type: ignore[assignment]
            else:  # member by member, each acting alone
                rollouts = [
                    c.collect(horizon) if a else None
                    for c, a in zip(collectors, active, strict=True)
                ]
            for i, r in enumerate(rollouts):
                if r is not None:
                    steps[i] += r.num_steps
                    if cfg.schedule_timing == "after_buffer":
                        current[i] = stack.schedules[i](steps[i])
            with timers.scope("update"), torch_threads(update_threads):
                if cfg.ratio == "per_dimension" and not by_pieces:
                    # by the policy that acted (pieces: as they were acted)
                    rollouts = [
                        None if r is None else dimension_log_probs(policy.member(i), r)
                        for i, r in enumerate(rollouts)
                    ]
                if (policy.normalize or by_pieces) and not valued:
                    # pieces: what an agent began before the last update was valued by the
                    # policy before it; ML-Agents values a piece once it is complete
                    rollouts = take_in(policy, rollouts, cfg.normalizer_prior, by_pieces)
                updates = ppo_update(
                    policy, optimizer, rollouts, cfg, current, generators, worker, stack.compiled
                )
            for i, update in enumerate(updates):
                if update is None:
                    continue
                update[STEPS] = float(steps[i])
                # of the episodes finished during its buffer (NaN: none), as ML-Agents'
                # summaries are of the steps since the last
                update[CUMULATIVE_REWARD] = _mean(episodes[i].returns[before[i] :])
                update[SUCCESS] = successes[i].buffer()
                histories[i].append(update)
                if sessions[i] is not None:
                    sessions[i].updated()  # type: ignore[union-attr]
                if len(histories[i]) in kept[i]:
                    snapshots[i][len(histories[i])] = policy.weights(i)
    finally:
        if worker is not None:
            worker.shutdown()
        if isinstance(collectors, Collection):
            collectors.release()
    wall = time.perf_counter() - started
    out = []
    for i in range(k):
        stats = summary(histories[i], episodes[i], successes[i].overall(), steps[i], wall)
        left = None if sessions[i] is None else sessions[i].finish(stats, steps[i])  # type: ignore[union-attr]
        out.append(
            Trained(
                policy.weights(i), stats, histories[i], optimizer, current[i], left, snapshots[i]
            )
        )
    return out


def _collection(
    stack: Stack,
    envs: Sequence[AgentEnvironment],
    policy: PolicyStack,
    generators: list[torch.Generator],
    session_for: SessionFor | None,
    merge: bool,
) -> tuple[
    Collection | list[Collecting], list[EpisodeLog], list[Session | None], list[SuccessLog], int
]:
    """Each member's session and collector, or one collection of all where every member
    collects fixed buffers with PPO's own collector (built-in tasks of one family merged into
    one core where `merge`); the members' episodes and successes, and the steps per buffer."""
    cfg, k = stack.cfg, len(envs)
    channels = [getattr(env, "stats_channel", None) for env in envs]
    for channel in channels:
        if channel is not None:
            channel.get_and_reset_stats()
    sessions = [
        None if session_for is None else session_for(i, policy.member(i), generators[i])
        for i in range(k)
    ]
    # a session's environment counts its own outcomes (a game's, from the learning team's view)
    successes = [
        SuccessLog(c if s is None else None) for c, s in zip(channels, sessions, strict=True)
    ]
    collectors: Collection | list[Collecting]
    if k > 1 and all(s is None for s in sessions) and cfg.buffer_assembly != "pieces":
        collectors = collection(envs, cfg.time_horizon, stack.timers, policy.device, merge)
        episodes, agents = collectors.episodes, {collectors.n}
    else:
        collectors = []
        for i, (s, env, g) in enumerate(zip(sessions, envs, generators, strict=True)):
            if s is not None:
                collectors.append(s.collector)
                continue
            member = policy.member(i)  # PPO's own collector: fixed buffers, or ML-Agents' pieces
            own = Collector(env, BEHAVIOR_NAME, member, g, cfg.time_horizon, stack.timers)
            pieces = cfg.buffer_assembly == "pieces"
            collectors.append(PieceCollector(own, member, cfg) if pieces else own)
        episodes, agents = [c.episodes for c in collectors], {c.num_agents for c in collectors}
    if len(agents) != 1:
        raise ValueError(AGENT_COUNTS)
    horizon = max(math.ceil(cfg.buffer_size / agents.pop()), 1)  # steps per buffer
    return collectors, episodes, sessions, successes, horizon


def make_optimizer(policy: PolicyStack, cfg: PPOConfig) -> StackOptimizer:
    """The stack's optimizer; with an `action_scale` s the actor's mean layer steps as it would
    stored times s (ML-Agents' mean layer, whose actions `clip(a, -s, s) / s` are ours)."""
    *_, (weight, bias) = policy.actor
    return StackOptimizer(
        policy.parameters(), cfg.optimizer, cfg.adam_epsilon, [weight, bias], cfg.action_scale
    )


class SuccessLog:
    """The success stat an environment reports, read buffer by buffer (NaN where none)."""

    def __init__(self, channel: StatsSideChannel | None) -> None:
        self.channel = channel
        self.values: list[float] = []

    def buffer(self) -> float:
        """The success of the episodes reported since the last read."""
        if self.channel is None:
            return float("nan")
        new = [v for v, _ in self.channel.get_and_reset_stats().get(SUCCESS, [])]
        self.values.extend(new)
        return _mean(new)

    def overall(self) -> float:
        """The success of every episode reported since the training began."""
        self.buffer()
        return _mean(self.values)


def summary(
    history: list[dict[str, float]], episodes: EpisodeLog, success: float, steps: int, wall: float
) -> dict[str, float]:
    """Mean update statistics, episode returns and lengths, counts, wall time and success."""
    stats = {key: float(np.mean([h[key] for h in history])) for key in (history or [{}])[0]}
    stats.update(
        {
            CUMULATIVE_REWARD: _mean(episodes.returns),
            EPISODE_LENGTH: _mean(episodes.lengths),
            "episodes": float(len(episodes.returns)),
            "steps": float(steps),
            "updates": float(len(history)),
            "wall_time_s": wall,
            SUCCESS: success,
        }
    )
    return stats


def _mean(values: list[float] | list[int]) -> float:
    return float(np.mean(values)) if values else float("nan")
