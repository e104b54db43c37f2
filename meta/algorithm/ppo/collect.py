"""k collectors of built-in tasks as one: one core per family, bookkeeping over (k, areas).

What `Collector.stepping` does for one environment, done for k at once: the members of one
family step as one core of all their areas (envs.tasks.stack), a member made of several tasks
side by side (a joint chunk's ConcatEnv) each of them in its family's core, and returns, lengths,
trajectory cuts and buffers are arrays over (member, area). Each member's buffer, episode log
and stats come out as its own collector's would: the same numbers, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from envs.interface import TaskEnvironment
from envs.tasks.adapter import ActionError
from envs.tasks.core import ACTION_SIZE, OBS_SIZE
from envs.tasks.stack import CoreStack, parts
from meta.algorithm.ppo.rollout import (
    Bootstrap,
    EpisodeLog,
    Pieces,
    Rollout,
    Timers,
    ValueFn,
    next_state_values,
)

Act = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""The stacked policy's (actions, log-probs, values) for (k, n, obs)."""


class StackedCollection:
    """Steps k built-in environments (one behavior, every agent deciding every step) together."""

    def __init__(
        self,
        envs: Sequence[TaskEnvironment],
        time_horizon: int,
        timers: Timers,
        device: torch.device,
    ) -> None:
        members = [parts(env) or [] for env in envs]  # each member's tasks, side by side
        for env in envs:
            env.reset()
        self.k, self.width = len(envs), members[0][0].num_areas
        self.n = len(members[0]) * self.width
        families: dict[type, list[tuple[int, int]]] = {}
        for i, tasks in enumerate(members):
            for j, task in enumerate(tasks):
                families.setdefault(type(task.core), []).append((i, j))
        self.groups = [
            (*self._places(slots), CoreStack([members[i][j] for i, j in slots]))
            for slots in families.values()
        ]
        self.obs = np.empty((self.k, self.n, OBS_SIZE), np.float32)
        for rows, columns, _, stack in self.groups:
            self.obs[rows, columns] = stack.observe().reshape(-1, self.width, OBS_SIZE)
        self.time_horizon, self.timers, self.device = time_horizon, timers, device
        shape = (self.k, self.n)
        self.episode_return = np.zeros(shape, np.float64)
        self.episode_length = np.zeros(shape, np.int64)
        self.trajectory_length = np.zeros(shape, np.int64)
        self.episodes = [EpisodeLog() for _ in envs]

    def collect(self, steps: int, act: Act, values_of: Sequence[ValueFn]) -> list[Rollout]:
        """`steps` steps of every member, `act` acting for all; each member's buffer, its
        bootstrap values by its own `values_of[i]`."""
        k, n, obs_size = self.obs.shape
        action_size = ACTION_SIZE
        obs_np = np.empty((k, steps, n, obs_size), np.float32)
        actions = torch.empty((k, steps, n, action_size))
        log_probs = torch.empty((k, steps, n))
        values = torch.empty((k, steps + 1, n))
        rewards = np.zeros((k, steps, n), np.float32)
        boundaries = np.zeros((k, steps, n), np.float32)
        ended = np.zeros((k, steps, n), bool)
        cuts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        clipped = np.empty((k, n, action_size), np.float32)
        done: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for t in range(steps):
            obs_np[:, t] = self.obs
            with self.timers.scope("policy_forward"):
                action, log_prob, value = act(torch.from_numpy(self.obs).to(self.device))
            actions[:, t].copy_(action)
            log_probs[:, t].copy_(log_prob)
            values[:, t].copy_(value)
            np.clip(actions[:, t].numpy(), -1.0, 1.0, out=clipped)
            if np.isnan(clipped).any():
                raise ActionError("continuous actions for the stacked tasks contain NaN")
            with self.timers.scope("env_step"):
                for rows, columns, slots, stack in self.groups:
                    self._step(stack, rows, columns, slots, clipped, t, rewards, ended, cuts)
            self.trajectory_length += 1
            self.episode_return += rewards[:, t]
            self.episode_length += 1
            now = ended[:, t]
            if now.any():
                done.append(
                    (np.nonzero(now)[0], self.episode_return[now], self.episode_length[now])
                )
                self.episode_return[now] = 0.0
                self.episode_length[now] = 0
            cut = now | (self.trajectory_length >= self.time_horizon)
            boundaries[:, t] = cut
            self.trajectory_length[cut] = 0
        for *_, stack in self.groups:
            stack.deliver()
        self._log(done)
        collected = (obs_np, actions, log_probs, values, rewards, boundaries, ended, cuts)
        return [self._rollout(i, *collected, v) for i, v in enumerate(values_of)]

    def release(self) -> None:
        """Hand every member's state back to its environment."""
        for *_, stack in self.groups:
            stack.release()

    def _step(
        self,
        stack: CoreStack,
        rows: slice | np.ndarray,
        columns: slice | np.ndarray,
        slots: np.ndarray,
        clipped: np.ndarray,
        t: int,
        rewards: np.ndarray,
        ended: np.ndarray,
        cuts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]],
    ) -> None:
        """One step of one family's core: its members' rewards, ends, cuts and observations."""
        width = self.width
        moves = clipped[rows, columns].reshape(-1, clipped.shape[2])
        obs, reward, finished = stack.step(moves)
        rewards[rows, t, columns] = reward.reshape(-1, width)
        self.obs[rows, columns] = obs.reshape(-1, width, obs.shape[1])
        if finished is None:
            return
        local, area = np.divmod(finished.agent_id, width)
        member, agent = slots[local, 0], slots[local, 1] * width + area
        rewards[member, t, agent] = finished.reward
        ended[member, t, agent] = True
        out = finished.interrupted
        if out.any():
            cuts.append((t, member[out], agent[out], finished.obs[out]))

    def _places(
        self, slots: list[tuple[int, int]]
    ) -> tuple[slice | np.ndarray, slice | np.ndarray, np.ndarray]:
        """Where a family's tasks (member, position) are in (k, n) arrays: rows and columns
        (slices where they are every member's whole row in order), and the slots themselves."""
        places = np.asarray(slots, np.int64).reshape(-1, 2)
        if slots == [(i, 0) for i in range(self.k)] and self.n == self.width:
            return slice(0, self.k), slice(0, self.n), places
        area = np.arange(self.width)
        return places[:, :1], places[:, 1:] * self.width + area, places

    def _log(self, done: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Each member's finished episodes, in the order its own collector logs them."""
        if not done:
            return
        member = np.concatenate([m for m, _, _ in done])
        returns = np.concatenate([r for _, r, _ in done])
        lengths = np.concatenate([n for _, _, n in done])
        for i, log in enumerate(self.episodes):
            mine = member == i
            log.returns.extend(returns[mine].tolist())
            log.lengths.extend(lengths[mine].tolist())

    def _rollout(
        self,
        i: int,
        obs: np.ndarray,
        actions: torch.Tensor,
        log_probs: torch.Tensor,
        values: torch.Tensor,
        rewards: np.ndarray,
        boundaries: np.ndarray,
        ended: np.ndarray,
        cuts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]],
        value_of: ValueFn,
    ) -> Rollout:
        """Member i's buffer, as its own collector returns it."""
        pieces: Pieces = []
        for t, member, area, final in cuts:
            mine = member == i
            if mine.any():
                pieces.append((t, area[mine].astype(np.int64), final[mine]))
        last_obs = torch.from_numpy(self.obs[i].copy())
        values[i, -1].copy_(value_of(last_obs.to(self.device)))
        next_values = next_state_values(value_of, values[i], ended[i], pieces, self.device)
        return Rollout(
            torch.from_numpy(obs[i]),
            actions[i],
            log_probs[i],
            values[i, :-1],
            torch.from_numpy(rewards[i]),
            next_values,
            torch.from_numpy(boundaries[i]),
            Bootstrap(last_obs, ended[i], pieces),
        )
