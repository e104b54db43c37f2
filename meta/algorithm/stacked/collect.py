"""k collectors of built-in tasks as one: one core per family, bookkeeping over (k, areas).

What `Collector.stepping` does for one environment, done for k at once: the members of one
family step as one core of all their areas (envs.tasks.stack), and returns, lengths,
trajectory cuts and buffers are arrays over (member, area). Each member's buffer, episode log
and stats come out as its own collector's would: the same numbers, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from envs.tasks.adapter import ActionError, TaskEnv
from envs.tasks.core import ACTION_SIZE, OBS_SIZE
from envs.tasks.stack import CoreStack
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
        self, envs: Sequence[TaskEnv], time_horizon: int, timers: Timers, device: torch.device
    ) -> None:
        for env in envs:
            env.reset()
        families: dict[type, list[int]] = {}
        for i, env in enumerate(envs):
            families.setdefault(type(env.core), []).append(i)
        self.groups = [
            (_rows(members, len(envs)), np.asarray(members), CoreStack([envs[i] for i in members]))
            for members in families.values()
        ]
        self.k, self.n = len(envs), envs[0].num_areas
        self.obs = np.empty((self.k, self.n, OBS_SIZE), np.float32)
        for rows, _, stack in self.groups:
            self.obs[rows] = stack.observe().reshape(-1, self.n, self.obs.shape[2])
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
                for rows, members, stack in self.groups:
                    self._step(stack, rows, members, clipped, t, rewards, ended, cuts)
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
        columns = (obs_np, actions, log_probs, values, rewards, boundaries, ended, cuts)
        return [self._rollout(i, *columns, v) for i, v in enumerate(values_of)]

    def release(self) -> None:
        """Hand every member's state back to its environment."""
        for *_, stack in self.groups:
            stack.release()

    def _step(
        self,
        stack: CoreStack,
        rows: slice | np.ndarray,
        members: np.ndarray,
        clipped: np.ndarray,
        t: int,
        rewards: np.ndarray,
        ended: np.ndarray,
        cuts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]],
    ) -> None:
        """One step of one family's core: its members' rewards, ends, cuts and observations."""
        n = self.n
        moves = clipped[rows].reshape(-1, clipped.shape[2])
        obs, reward, finished = stack.step(moves)
        rewards[rows, t] = reward.reshape(-1, n)
        self.obs[rows] = obs.reshape(-1, n, obs.shape[1])
        if finished is None:
            return
        local, area = np.divmod(finished.agent_id, n)
        member = members[local]
        rewards[member, t, area] = finished.reward
        ended[member, t, area] = True
        out = finished.interrupted
        if out.any():
            cuts.append((t, member[out], area[out], finished.obs[out]))

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


def _rows(members: list[int], k: int) -> slice | np.ndarray:
    """The members' rows of a (k, ...) array: a slice when they are 0..k−1 in order."""
    if members == list(range(k)):
        return slice(0, k)
    return np.asarray(members)
