"""Rollout collection through the ML-Agents BaseEnv API, batched over all agents."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.policy import FrozenPolicy
from meta.runtime.threads import torch_threads


class Timers(Protocol):
    """Anything with a `scope(name)` context manager (meta.observe.timers.RunTimers)."""

    def scope(self, name: str) -> contextlib.AbstractContextManager[Any]: ...


StepHook = Callable[[torch.Tensor, np.ndarray, np.ndarray], bool]
"""Told of a step's observations (n, obs), the agents whose trajectory it cut (at an episode's
end or at time_horizon) and those whose episode it ended; True if it changed the policy."""
ValueFn = Callable[[torch.Tensor], torch.Tensor]
"""V(s) of a batch of observations, (batch,)."""
Acted = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""A policy's (action, log-prob, value) for one step of every agent."""

SERIAL_BATCH = 256
"""Collections of up to this many agents run on one torch thread: a second gains nothing at 64
(meta-bench, phases) and costs dearly when another process holds the other core."""


class Acting(Protocol):
    """A policy that acts: its weights packed for acting, and where they are."""

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        ...

    def frozen(self) -> FrozenPolicy:
        """The current weights packed for acting."""
        ...


class NullTimers:
    """Timers that time nothing."""

    def scope(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A no-op context."""
        return contextlib.nullcontext()


@dataclass(frozen=True)
class Bootstrap:
    """The observations a buffer's next-state values come from, beside its own obs."""

    last_obs: torch.Tensor
    """The observation after the buffer's last step, (n, obs)."""
    ended: np.ndarray
    """(T, n): True where the task ended the episode at t (its next value is 0)."""
    pieces: Pieces
    """Trajectories cut before their end, with the observation to bootstrap each from."""


@dataclass
class Rollout:
    """One buffer of experience, time-major: tensors of shape (T, n, ...)."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    next_values: torch.Tensor
    """Bootstrap value of the next state: V(s'), V(terminal obs) on time-outs, 0 on terminals."""
    boundaries: torch.Tensor
    """1 where the recursion stops after t: episode end or a trajectory cut at time_horizon."""
    bootstrap: Bootstrap | None = None
    """What the values are estimated from, to estimate them again (revalued)."""
    valid: torch.Tensor | None = None
    """(T, n) bool: the steps that are the buffer's (None: all). Assembled from pieces
    (meta.algorithm.ppo.pieces), the others are steps an agent took before its first piece
    of the buffer or after its last, there only so that every tensor stays (T, n)."""

    @property
    def num_steps(self) -> int:
        """Agent-steps in the buffer."""
        return self.rewards.numel() if self.valid is None else int(self.valid.sum())

    def buffer_rows(self, x: torch.Tensor) -> torch.Tensor:
        """A (T, n, ...) column of this buffer as rows (num_steps, ...), the buffer's only."""
        if self.valid is None:
            return x.reshape(self.rewards.numel(), *x.shape[2:])
        return x[self.valid]


@dataclass
class EpisodeLog:
    """Returns and lengths of the episodes finished so far."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


class Collector:
    """Steps one behavior of a BaseEnv whose agents all request a decision every step."""

    def __init__(
        self,
        env: AgentEnvironment,
        behavior: str,
        policy: Acting,
        generator: torch.Generator,
        time_horizon: int,
        timers: Timers | None = None,
        threads: int | None = None,
    ) -> None:
        """`threads`: torch threads to collect with (default 1 to SERIAL_BATCH agents, else all)."""
        self.env, self.behavior, self.policy = env, behavior, policy
        self.threads = threads
        self.generator, self.time_horizon = generator, time_horizon
        self.timers: Timers = timers or NullTimers()
        self.device = policy.device
        env.reset()
        decision, _ = env.get_steps(behavior)
        self.agent_ids = decision.agent_id.copy()
        if len(self.agent_ids) == 0:
            raise ValueError(
                f"behavior {behavior!r} has no agent requesting a decision after reset"
            )
        self.index = id_lookup(self.agent_ids)
        self.obs = decision.obs[0]
        n = len(self.agent_ids)
        self.episode_return = np.zeros(n, np.float64)
        self.episode_length = np.zeros(n, np.int64)
        self.trajectory_length = np.zeros(n, np.int64)
        self.episodes = EpisodeLog()

    @property
    def num_agents(self) -> int:
        """Agents stepped together."""
        return len(self.agent_ids)

    def collect(self, steps: int, after_step: StepHook | None = None) -> Rollout:
        """Run `steps` environment steps for every agent and return the filled buffer.

        `after_step`, if given, is told of each step as it is taken; when it says the policy
        changed, the next step acts with the policy as it is then.
        """
        threads = self.threads
        if threads is None:
            threads = 1 if self.num_agents <= SERIAL_BATCH else torch.get_num_threads()
        with torch_threads(threads):
            acting = self.policy.frozen()
            stepping = self.stepping(steps, acting.value)
            obs = next(stepping)
            while True:
                with self.timers.scope("policy_forward"):
                    acted = acting.act(obs.to(self.device), self.generator)
                try:
                    taken, obs = obs, stepping.send(acted)
                except StopIteration as done:
                    if after_step is not None:
                        after_step(obs, self.trajectory_length == 0, self.episode_length == 0)
                    return done.value
                if after_step is not None and after_step(
                    taken, self.trajectory_length == 0, self.episode_length == 0
                ):
                    acting = self.policy.frozen()

    def stepping(self, steps: int, value_of: ValueFn) -> Generator[torch.Tensor, Acted, Rollout]:
        """`steps` environment steps: yields each observation, is sent the policy's (action,
        log-prob, value) for it and returns the filled buffer, its bootstrap values by `value_of`.

        Whoever drives it acts: the collector itself, or a caller acting for it.
        """
        n, obs_size = self.obs.shape
        action_size = self.env.behavior_specs[self.behavior].action_spec.continuous_size
        obs_np = np.empty((steps, n, obs_size), np.float32)
        obs = torch.from_numpy(obs_np)
        actions = torch.empty((steps, n, action_size))
        log_probs = torch.empty((steps, n))
        values = torch.empty((steps + 1, n))
        rewards = np.zeros((steps, n), np.float32)
        boundaries = np.zeros((steps, n), np.float32)
        ended = np.zeros((steps, n), bool)
        timeouts: Pieces = []
        clipped = np.empty((n, action_size), np.float32)
        # One ActionTuple over a reused buffer: the env reads it before the next step rewrites it.
        action_tuple = ActionTuple(continuous=clipped)
        ids = self.agent_ids
        for t in range(steps):
            obs_np[t] = self.obs
            action, log_prob, value = yield obs[t]
            actions[t].copy_(action)
            log_probs[t].copy_(log_prob)
            values[t].copy_(value)
            np.clip(actions[t].numpy(), -1.0, 1.0, out=clipped)
            with self.timers.scope("env_step"):
                self.env.set_actions(self.behavior, action_tuple)
                self.env.step()
                decision, terminal = self.env.get_steps(self.behavior)
            if decision.agent_id is not ids and not np.array_equal(decision.agent_id, ids):
                raise RuntimeError(
                    "agents changed between steps: every agent must decide every step"
                )
            ids = decision.agent_id
            rewards[t] = decision.reward
            self.trajectory_length += 1
            if len(terminal) > 0:
                idx = self.index(terminal.agent_id)
                rewards[t, idx] = terminal.reward
                ended[t, idx] = True
                timed_out = terminal.interrupted
                if timed_out.any():
                    timeouts.append((t, idx[timed_out], terminal.obs[0][timed_out]))
                self._log_episodes(rewards[t], ended[t])
            else:
                self.episode_return += rewards[t]
                self.episode_length += 1
            cut = ended[t] | (self.trajectory_length >= self.time_horizon)
            boundaries[t] = cut
            self.trajectory_length[cut] = 0
            self.obs = decision.obs[0]
        last_obs = torch.from_numpy(self.obs.copy())
        values[steps].copy_(value_of(last_obs.to(self.device)))
        next_values = next_state_values(value_of, values, ended, timeouts, self.device)
        return Rollout(
            obs,
            actions,
            log_probs,
            values[:-1],
            torch.from_numpy(rewards),
            next_values,
            torch.from_numpy(boundaries),
            Bootstrap(last_obs, ended, timeouts),
        )

    def _log_episodes(self, rewards: np.ndarray, ended: np.ndarray) -> None:
        self.episode_return += rewards
        self.episode_length += 1
        if ended.any():
            self.episodes.returns.extend(self.episode_return[ended].tolist())
            self.episodes.lengths.extend(self.episode_length[ended].tolist())
            self.episode_return[ended] = 0.0
            self.episode_length[ended] = 0


Pieces = list[tuple[int, np.ndarray, np.ndarray]]
"""Trajectories cut before their end: (step, rows, the observation to bootstrap from)."""


def next_state_values(
    value: ValueFn,
    values: torch.Tensor,
    ended: np.ndarray,
    pieces: Pieces,
    device: torch.device,
) -> torch.Tensor:
    """Next-state values: V(s') by default, 0 where an episode ended, V(final) for `pieces`."""
    next_values = values[1:].clone()
    next_values[torch.from_numpy(ended)] = 0.0
    if pieces:
        # Time-outs (and other cuts) are not failures: bootstrap them from the value of the
        # final state, all of the buffer's in one batch.
        final_obs = torch.from_numpy(np.concatenate([o for _, _, o in pieces]))
        final_values = value(final_obs.to(device)).cpu()
        rows = torch.from_numpy(np.concatenate([np.full(len(i), t) for t, i, _ in pieces]))
        cols = torch.from_numpy(np.concatenate([i for _, i, _ in pieces]))
        next_values[rows, cols] = final_values
    return next_values


def id_lookup(agent_ids: np.ndarray) -> Any:
    """Map agent ids to rows; the identity when ids are 0..n-1, as in ML-Agents' areas."""
    if np.array_equal(agent_ids, np.arange(len(agent_ids))):
        return lambda ids: np.asarray(ids, np.int64)
    order = np.argsort(agent_ids)
    sorted_ids = agent_ids[order]
    return lambda ids: order[np.searchsorted(sorted_ids, ids)]
