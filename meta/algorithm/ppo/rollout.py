"""Rollout collection, batched over all agents of k members' environments (one for a Collector)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from envs.tasks.adapter import ActionError, TaskEnv
from envs.tasks.core import ACTION_SIZE
from envs.tasks.stack import CoreStack, parts, stackable_envs
from meta.algorithm.ppo.network import Policy, PolicyStack
from meta.process.compute import torch_threads


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
Act = Callable[[torch.Tensor], Acted]
"""Every member's (actions, log-probs, values) (k, n, ...) for their observations (k, n, obs)."""

AGENT_COUNTS = "stacked trainings need the same number of agents in every environment"
SERIAL_BATCH = 256
"""Collections of up to this many agents run on one torch thread: a second gains nothing at 64
(meta-bench, phases) and costs dearly when another process holds the other core."""


Acting = PolicyStack | Policy
"""A policy that acts: its weights packed for acting (`frozen`), and where they are."""


class NullTimers:
    """Timers that time nothing."""

    def scope(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A no-op context."""
        return contextlib.nullcontext()


Pieces = list[tuple[int, np.ndarray, np.ndarray]]
"""Trajectories cut before their end: (step, rows, the observation to bootstrap from)."""
Cut = tuple[int, np.ndarray, np.ndarray, np.ndarray]
"""Episodes of a step ended before their end: (step, members, agents, final observations)."""


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
    bootstrap: Bootstrap
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


class Collection:
    """k members' environments stepped together, one act for all at each step.

    Each member's buffer, episode log and stats come out as its environment stepped alone
    gives them, bit for bit (`collection` makes one).
    """

    def __init__(
        self,
        groups: Sequence[Cores | Agents],
        k: int,
        n: int,
        time_horizon: int,
        timers: Timers,
        device: torch.device,
    ) -> None:
        self.groups, self.k, self.n = groups, k, n
        self.time_horizon, self.timers, self.device = time_horizon, timers, device
        self.cores = [group.stack for group in groups if isinstance(group, Cores)]
        self.obs = np.empty((k, n, groups[0].first.shape[-1]), np.float32)
        for group in groups:
            group.place(self.obs, group.first)
        self.episode_return = np.zeros((k, n), np.float64)
        self.episode_length = np.zeros((k, n), np.int64)
        self.trajectory_length = np.zeros((k, n), np.int64)
        self.restarted = np.zeros(k, bool)
        """Members whose environment a step reset (a game's, when its learning team changed)."""
        self.episodes = [EpisodeLog() for _ in range(k)]

    def collect(
        self,
        steps: int,
        act: Act,
        values_of: Sequence[ValueFn],
        after_step: StepHook | None = None,
    ) -> list[Rollout]:
        """`steps` steps of every member, `act` acting for all; each member's buffer, its
        bootstrap values by its own `values_of[i]`. `after_step` (a stack of one) is told of
        each step as it is taken."""
        (k, n, obs_size), action_size = self.obs.shape, self.groups[0].action_size
        obs = np.empty((k, steps, n, obs_size), np.float32)
        actions = torch.empty((k, steps, n, action_size))
        log_probs, values = torch.empty((k, steps, n)), torch.empty((k, steps + 1, n))
        self.rewards = np.zeros((k, steps, n), np.float32)
        self.ended = np.zeros((k, steps, n), bool)
        self.cuts: list[Cut] = []
        boundaries = np.zeros((k, steps, n), np.float32)
        clipped = np.empty((k, n, action_size), np.float32)
        done: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for t in range(steps):
            obs[:, t] = self.obs
            with self.timers.scope("policy_forward"):
                action, log_prob, value = act(torch.from_numpy(self.obs).to(self.device))
            actions[:, t].copy_(action)
            log_probs[:, t].copy_(log_prob)
            values[:, t].copy_(value)
            np.clip(actions[:, t].numpy(), -1.0, 1.0, out=clipped)
            with self.timers.scope("env_step"):
                for group in self.groups:
                    group.step(self, clipped, t)
            self.trajectory_length += 1
            self.episode_return += self.rewards[:, t]
            self.episode_length += 1
            now = self.ended[:, t]
            if now.any():
                done.append(
                    (np.nonzero(now)[0], self.episode_return[now], self.episode_length[now])
                )
                self.episode_return[now] = 0.0
                self.episode_length[now] = 0
            cut = now | (self.trajectory_length >= self.time_horizon)
            if self.restarted.any():  # every trajectory cut, every unfinished episode dropped
                cut[self.restarted] = True
                self.episode_return[self.restarted] = 0.0
                self.episode_length[self.restarted] = 0
                self.restarted[:] = False
            boundaries[:, t] = cut
            self.trajectory_length[cut] = 0
            if after_step is not None:
                taken = torch.from_numpy(obs[0, t])
                after_step(taken, self.trajectory_length[0] == 0, self.episode_length[0] == 0)
        for stack in self.cores:
            stack.deliver()
        if done:  # each member's finished episodes, in the order of its agents' steps
            member, returns, lengths = (
                np.concatenate(column) for column in zip(*done, strict=True)
            )
            for i, log in enumerate(self.episodes):
                log.returns.extend(returns[member == i].tolist())
                log.lengths.extend(lengths[member == i].tolist())
        rollouts = []
        for i, value_of in enumerate(values_of):
            pieces: Pieces = [
                (t, agent[mine].astype(np.int64), final[mine])
                for t, member, agent, final in self.cuts
                if (mine := member == i).any()
            ]
            last_obs = torch.from_numpy(self.obs[i].copy())
            values[i, -1].copy_(value_of(last_obs.to(self.device)))
            ended = self.ended[i]
            rollouts.append(
                Rollout(
                    torch.from_numpy(obs[i]),
                    actions[i],
                    log_probs[i],
                    values[i, :-1],
                    torch.from_numpy(self.rewards[i]),
                    next_state_values(value_of, values[i], ended, pieces, self.device),
                    torch.from_numpy(boundaries[i]),
                    Bootstrap(last_obs, ended, pieces),
                )
            )
        return rollouts

    def record(self, i: int, t: int, decision: Any, terminal: Any, index: Any) -> None:
        """Member i's step t from its agents' DecisionSteps and TerminalSteps (`index`: their
        rows by agent id): rewards, ended episodes and time-outs."""
        self.rewards[i, t] = decision.reward
        if len(terminal) == 0:
            return
        rows = index(terminal.agent_id)
        self.rewards[i, t, rows] = terminal.reward
        self.ended[i, t, rows] = True
        out = terminal.interrupted
        if out.any():
            self.cuts.append((t, np.full(int(out.sum()), i), rows[out], terminal.obs[0][out]))

    def release(self) -> None:
        """Hand every member's state back to its environment."""
        for stack in self.cores:
            stack.release()


class Cores:
    """The tasks of one family, of any members, stepped as one core (envs.tasks.stack)."""

    action_size = ACTION_SIZE

    def __init__(self, slots: list[tuple[int, int]], members: list[list[TaskEnv]], k: int, n: int):
        self.stack = CoreStack([members[i][j] for i, j in slots])
        self.width, self.slots = self.stack.n, np.asarray(slots, np.int64).reshape(-1, 2)
        self.first = self.stack.observe()
        # where its areas are in (k, n) arrays: slices where they are every member's whole row
        self.rows: slice | np.ndarray = self.slots[:, :1]
        self.columns: slice | np.ndarray = self.slots[:, 1:] * self.width + np.arange(self.width)
        if slots == [(i, 0) for i in range(k)] and n == self.width:
            self.rows, self.columns = slice(0, k), slice(0, n)

    def place(self, into: np.ndarray, obs: np.ndarray) -> None:
        """The areas' observations (areas, obs) into their places in (k, n, obs)."""
        into[self.rows, self.columns] = obs.reshape(-1, self.width, obs.shape[-1])

    def step(self, c: Collection, clipped: np.ndarray, t: int) -> None:
        """One step of the core: its members' rewards, ends, cuts and observations."""
        moves = clipped[self.rows, self.columns].reshape(-1, clipped.shape[2])
        if np.isnan(moves).any():
            raise ActionError("continuous actions for the stacked tasks contain NaN")
        obs, reward, finished = self.stack.step(moves)
        c.rewards[self.rows, t, self.columns] = reward.reshape(-1, self.width)
        self.place(c.obs, obs)
        if finished is None:
            return
        local, area = np.divmod(finished.agent_id, self.width)
        member, agent = self.slots[local, 0], self.slots[local, 1] * self.width + area
        c.rewards[member, t, agent] = finished.reward
        c.ended[member, t, agent] = True
        out = finished.interrupted
        if out.any():
            c.cuts.append((t, member[out], agent[out], finished.obs[out]))


class Agents:
    """One member's environment stepped through the BaseEnv API."""

    def __init__(self, member: int, env: AgentEnvironment, behavior: str) -> None:
        self.member, self.env, self.behavior = member, env, behavior
        self.action_size = env.behavior_specs[behavior].action_spec.continuous_size
        env.reset()
        decision, _ = env.get_steps(behavior)
        self.ids = decision.agent_id.copy()
        if len(self.ids) == 0:
            raise ValueError(
                f"behavior {behavior!r} has no agent requesting a decision after reset"
            )
        self.index, self.first = id_lookup(self.ids), decision.obs[0]
        self.actions: tuple[np.ndarray, ActionTuple] | None = None
        """The collection's actions and an ActionTuple over this member's row of them."""

    def place(self, into: np.ndarray, obs: np.ndarray) -> None:
        """The observations into the member's row of (k, n, obs)."""
        into[self.member] = obs

    def step(self, c: Collection, clipped: np.ndarray, t: int) -> None:
        """One step of the environment: the member's rewards, ends, cuts and observations."""
        i = self.member
        if self.actions is None or self.actions[0] is not clipped:
            self.actions = (clipped, ActionTuple(continuous=clipped[i]))
        self.env.set_actions(self.behavior, self.actions[1])
        self.env.step()
        decision, terminal = self.env.get_steps(self.behavior)
        if decision.agent_id is not self.ids and not np.array_equal(decision.agent_id, self.ids):
            raise RuntimeError("agents changed between steps: every agent must decide every step")
        self.ids = decision.agent_id
        c.record(i, t, decision, terminal, self.index)
        c.obs[i] = decision.obs[0]


def collection(
    envs: Sequence[AgentEnvironment],
    time_horizon: int,
    timers: Timers,
    device: torch.device,
    merge: bool = True,
) -> Collection:
    """The members' environments as one collection: built-in tasks of several members
    (`merge`) as one core per family over all their areas (envs.tasks.stack), a member of
    several tasks side by side (a joint chunk's ConcatEnv) each in its family's core; any
    other environment through the BaseEnv API."""
    k = len(envs)
    if merge and k > 1 and stackable_envs(envs):
        members = [parts(env) or [] for env in envs]  # each member's tasks, side by side
        for env in envs:
            env.reset()
        families: dict[type, list[tuple[int, int]]] = {}
        for i, tasks in enumerate(members):
            for j, task in enumerate(tasks):
                families.setdefault(type(task.core), []).append((i, j))
        n = len(members[0]) * members[0][0].num_areas
        cores = [Cores(slots, members, k, n) for slots in families.values()]
        return Collection(cores, k, n, time_horizon, timers, device)
    groups = [Agents(i, env, BEHAVIOR_NAME) for i, env in enumerate(envs)]
    if len({len(group.first) for group in groups}) > 1:
        raise ValueError(AGENT_COUNTS)
    return Collection(groups, k, len(groups[0].first), time_horizon, timers, device)


class Collector:
    """Steps one environment: one behavior whose agents all decide every step, or `Agents`."""

    def __init__(
        self,
        env: AgentEnvironment,
        behavior: str | Agents,
        policy: Acting,
        generator: torch.Generator,
        time_horizon: int,
        timers: Timers | None = None,
        threads: int | None = None,
    ) -> None:
        """`threads`: torch threads to collect with (default 1 to SERIAL_BATCH agents, else all)."""
        self.policy, self.generator, self.threads = policy, generator, threads
        agents = Agents(0, env, behavior) if isinstance(behavior, str) else behavior
        self.collection = Collection(
            [agents], 1, len(agents.first), time_horizon, timers or NullTimers(), policy.device
        )
        self.num_agents, self.episodes = self.collection.n, self.collection.episodes[0]
        """Agents stepped together, and the episodes they finished so far."""

    def collect(self, steps: int, after_step: StepHook | None = None) -> Rollout:
        """Run `steps` environment steps for every agent and return the filled buffer.

        `after_step`, if given, is told of each step as it is taken; when it says the policy
        changed, the next step acts with the policy as it is then.
        """
        threads = self.threads
        if threads is None:
            threads = 1 if self.num_agents <= SERIAL_BATCH else torch.get_num_threads()
        acting = [self.policy.frozen()]

        def act(obs: torch.Tensor) -> Acted:
            action, log_prob, value = acting[0].act(obs[0], self.generator)
            return action[None], log_prob[None], value[None]

        def hook(obs: torch.Tensor, cut: np.ndarray, ended: np.ndarray) -> bool:
            assert after_step is not None
            if changed := after_step(obs, cut, ended):
                acting[0] = self.policy.frozen()
            return changed

        with torch_threads(threads):
            hooked = None if after_step is None else hook
            return self.collection.collect(steps, act, [acting[0].value], hooked)[0]


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
