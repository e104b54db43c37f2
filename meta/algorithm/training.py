"""The runner of training requests: a stack of k requests through the one inner PPO.

A game of teams trains with the ghost trainer's session (meta.algorithm.selfplay); this is the
one place that knows both (`ppo` never imports `selfplay`, which builds on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, fields
from functools import cache

import torch

from envs.interface import AgentEnvironment
from envs.tasks.teams import team_of
from meta.algorithm.fomaml import meta_gradient
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import Policy, PolicyStack, make_policy, policy_for, sizes_of
from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.algorithm.ppo.train import Schedule, Session, Stack, train_stack
from meta.algorithm.ppo.weights import Weights, cpu_weights
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.resets import reset_keys
from meta.algorithm.selfplay.trainer import GameSession
from meta.config.ppo import NetworkConfig, PPOConfig

__all__ = ["PER_MEMBER", "is_game", "stack_key", "start_policy", "train", "train_requests"]

PER_MEMBER = (
    *("learning_rate", "beta", "epsilon"),
    *("learning_rate_schedule", "beta_schedule", "epsilon_schedule", "summary_freq"),
)
"""PPO's settings a member of a stack takes from its own request (its schedule, its game's
session); the stack reads every other one from its first member's, so they share them."""


def train(
    request: TrainRequest, env: AgentEnvironment, timers: Timers | None = None
) -> TrainResult:
    """Train the request's start in `env`: a stack of one."""
    return train_requests([request], [env], timers)[0]


def train_requests(
    requests: Sequence[TrainRequest],
    envs: Sequence[AgentEnvironment],
    timers: Timers | None = None,
    merge: bool = True,
    compiled: bool = False,
) -> list[TrainResult]:
    """Train every request on its environment as one stack (they share `stack_key`); the
    trained weights, statistics and what each asked for, in order.

    A request's optimizer state is copied, never changed. A game of teams trains with the
    ghost trainer from the request's self-play state; other tasks pass that state through. A
    request of 0 updates gives back its start alone. `merge` and `compiled`: see `train_stack`.
    """
    timers = timers or NullTimers()
    first = requests[0]
    games = [is_game(env, first.ppo) for env in envs]
    starts = [start_weights(r, e) for r, e in zip(requests, envs, strict=True)]
    # games collect member by member, the others in lockstep, and networks of other shapes
    # (other observation or action specs) cannot share a stack: each kind in a stack of its
    # own, so that a member's companions never change how it acts
    kinds = [(g, tuple(w.shape for w in s.values())) for g, s in zip(games, starts, strict=True)]
    if len(set(kinds)) > 1:
        grouped: dict[int, TrainResult] = {}
        for kind in dict.fromkeys(sorted(kinds, key=lambda k: k[0])):
            mine = [i for i, other in enumerate(kinds) if other == kind]
            kind_results = train_requests(
                [requests[i] for i in mine], [envs[i] for i in mine], timers, merge, compiled
            )
            grouped.update(zip(mine, kind_results, strict=True))
        return [grouped[i] for i in range(len(requests))]
    if first.updates == 0:
        return [
            TrainResult(start, {}, snapshots={0: start} if 0 in r.snapshots else {})
            for r, start in zip(requests, starts, strict=True)
        ]
    for request in requests:
        request.ppo.validate()
        rate = (request.hyper or Hyper.of(request.ppo)).learning_rate
        if rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {rate}")

    def session_for(i: int, member: PolicyStack, generator: torch.Generator) -> Session | None:
        if not games[i]:
            return None
        r = requests[i]
        return GameSession(envs[i], member, r.ppo, r.self_play_state, r.seed, generator, timers)

    stack = Stack(
        starts=starts,
        cfg=first.ppo,
        normalize=first.network.normalize,
        normalizer_epsilon=first.network.normalizer_epsilon,
        device=first.device,
        seeds=[r.seed for r in requests],
        schedules=[_schedule(r) for r in requests],
        optimizer_states=[r.optimizer_state for r in requests],
        updates=first.updates,
        snapshots=[r.snapshots for r in requests],
        timers=timers,
        compiled=compiled,
    )
    trained = train_stack(stack, envs, session_for, merge)
    results = []
    for i, (request, done) in enumerate(zip(requests, trained, strict=True)):
        kept = done.optimizer_state(i) if request.returns_optimizer else None
        state = done.left if games[i] else request.self_play_state
        assert state is None or isinstance(state, dict)
        gradient, stats = None, done.stats
        if request.meta_gradient:  # FOMAML's, its buffer counted in the training's steps
            with timers.scope("meta_gradient"):
                gradient, steps = meta_gradient(request, envs[i], done.weights)
            stats = {**stats, "steps": stats["steps"] + steps}
        result = TrainResult(
            done.weights, stats, done.updates, kept, state, gradient, done.snapshots
        )
        results.append(result)
    return results


def stack_key(request: TrainRequest) -> tuple[object, ...]:
    """What the requests of one stack share: PPO's settings but PER_MEMBER, the network's
    shape and normaliser (a fresh start's initialisation is the member's), the device, the
    updates, the tasks side by side; other requests train in other stacks."""
    net, names = request.network, [f.name for f in fields(PPOConfig) if f.name not in PER_MEMBER]
    ppo = tuple((name, getattr(request.ppo, name)) for name in names)
    network = (net.hidden_units, net.num_layers, net.normalize, net.normalizer_epsilon)
    return (ppo, network, request.device, request.updates, len(request.tasks))


def _schedule(request: TrainRequest) -> Schedule:
    """The request's learning rate, beta and epsilon after a number of its agent-steps."""
    if request.schedule is not None:
        return request.schedule.at
    cfg, start = request.ppo, request.hyper or Hyper.of(request.ppo)
    return lambda steps: start.after(cfg, steps, cfg.max_steps)


def start_weights(request: TrainRequest, env: AgentEnvironment) -> Weights:
    """The request's start as CPU weights: a copy of its own where nothing resets them and they
    have the network's layout (no policy to build), else `start_policy`'s."""
    given = request.weights
    if given is not None and not request.reset and request.log_std is None:
        layout = _layout(*sizes_of(env), astuple(request.network))
        if {k: (v.shape, v.dtype) for k, v in given.items()} == layout:
            return {k: given[k].detach().to("cpu", copy=True) for k in layout}
    return cpu_weights(start_policy(request, env))


@cache
def _layout(obs_size: int, action_size: int, network: tuple) -> dict[str, tuple]:
    """The names, shapes and dtypes of a policy's state_dict, in its order."""
    weights = make_policy(obs_size, action_size, NetworkConfig(*network), seed=0).state_dict()
    return {k: (v.shape, v.dtype) for k, v in weights.items()}


def start_policy(request: TrainRequest, env: AgentEnvironment) -> Policy:
    """The request's start on its device: its weights, or a fresh policy from its seed.

    The request's resets take their parts from the fresh policy of its seed (a scratch start
    is that policy already: resets leave it as it is).
    """
    fresh = request.weights is None
    policy = policy_for(env, request.network, seed=request.seed if fresh else 0)
    policy = policy.to(request.device)
    if request.weights is not None:
        policy.load_state_dict(request.weights)
        if request.reset:
            new = policy_for(env, request.network, seed=request.seed).state_dict()
            keys = reset_keys(new, request.reset)
            policy.load_state_dict({**policy.state_dict(), **{k: new[k] for k in keys}})
    if request.log_std is not None:
        with torch.no_grad():
            policy.log_std.fill_(request.log_std)
    return policy


def is_game(env: AgentEnvironment, cfg: PPOConfig) -> bool:
    """Whether the env is a game of teams; ValueError if it is one and self_play is not set."""
    teams = [name for name in env.behavior_specs if team_of(name) is not None]
    if teams and cfg.self_play is None:
        raise ValueError(
            f"behaviors {', '.join(teams)} have team ids but ppo.self_play is not set: "
            "a game of teams trains with self-play (add ppo.self_play, e.g. ppo=selfplay)"
        )
    return bool(teams)
