"""ML-Agents' buffer assembly (`ppo.buffer_assembly=pieces`): buffers of whole trajectory pieces.

ML-Agents cuts each agent's trajectory into pieces at `time_horizon` steps or at the end of an
episode, adds a piece to the update buffer once it is complete, and updates as soon as the
buffer holds more than `buffer_size` steps; what an agent has begun since its last cut goes
into the next buffer, acted by the policy before the update. Every agent still steps as one
array here: the collector steps all agents until the completed pieces exceed `buffer_size`,
and the buffer is the (T, n) window of those steps with a mask of each agent's pieces. With
the normaliser on, each piece goes into it as it completes (meta.algorithm.ppo.piece_values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.network import Member
from meta.algorithm.ppo.piece_values import PieceNormaliser
from meta.algorithm.ppo.policy import gaussian_log_prob
from meta.algorithm.ppo.rollout import Bootstrap, Collector, EpisodeLog, Rollout

COLUMNS = ("obs", "actions", "log_probs", "values", "rewards", "next_values", "boundaries")


class PieceCollector:
    """A Collector's steps assembled into buffers of whole pieces, as ML-Agents' trainer does."""

    def __init__(self, collector: Collector, policy: Member, cfg: PPOConfig) -> None:
        self.collector, self.policy = collector, policy
        self.buffer_size = cfg.buffer_size
        self.per_dimension = cfg.ratio == "per_dimension"
        self.carry: Rollout | None = None
        """The steps after every agent's last cut, for the next buffer."""
        self.first = np.zeros(collector.num_agents, np.int64)
        """Per agent, its first step of the next buffer within `carry`."""
        self.normaliser = (
            PieceNormaliser(policy, collector.num_agents, cfg.normalizer_prior)
            if policy.normalize
            else None
        )
        """With the normaliser on: the pieces taken into it one step at a time, as completed."""

    @property
    def num_agents(self) -> int:
        """Agents stepped per environment step."""
        return self.collector.num_agents

    @property
    def episodes(self) -> EpisodeLog:
        """The episodes finished so far."""
        return self.collector.episodes

    def collect(self, steps: int) -> Rollout:
        """The next buffer: steps until the pieces completed exceed buffer_size (`steps`, the
        fixed assembly's horizon, is not used). Without the normaliser its values are those of
        the policies that acted, the carried steps' from before the last update: estimate them
        again before updating; with it, each piece comes valued as ML-Agents values it."""
        n, normaliser = self.num_agents, self.normaliser
        carried = [] if self.carry is None else [self.carry]
        window = sum(len(p.rewards) for p in carried)
        if normaliser is not None:
            normaliser.begin(window)
        hook = None if normaliser is None else normaliser.step
        parts: list[Rollout] = []
        last = self.first - 1  # per agent, its last cut in the window
        while int((last - self.first + 1).sum()) <= self.buffer_size:
            begun = window * n - int(self.first.sum())
            # no step can complete more than what has begun, so these steps cannot end it
            ahead = max((self.buffer_size - begun) // n + 1, 1)
            part = self.collector.collect(ahead, hook)
            if self.per_dimension and normaliser is None:
                part = dimension_log_probs(self.policy, part)  # by the policy that acted
            cuts = part.boundaries.numpy() > 0
            latest = window + ahead - 1 - np.argmax(cuts[::-1], axis=0)
            last = np.where(cuts.any(axis=0), latest, last)
            parts.append(part)
            window += ahead
        fresh = concat(parts)
        if self.per_dimension and normaliser is not None:
            fresh = dimension_log_probs(self.policy, fresh, normaliser.acted_features(fresh))
        whole = concat([*carried, fresh])
        t = np.arange(window)[:, None]
        buffer = replace(whole, valid=torch.from_numpy((t >= self.first) & (t <= last)))
        if normaliser is not None:
            buffer = normaliser.valued(buffer)
        start = int((last + 1).min())
        self.carry = time_slice(buffer, start) if start < window else None
        self.first = last + 1 - start
        return buffer


def concat(parts: list[Rollout]) -> Rollout:
    """Consecutive rollouts of the same agents as one, along time."""
    if len(parts) == 1:
        return parts[0]
    columns = {name: torch.cat([getattr(p, name) for p in parts]) for name in COLUMNS}
    offsets = np.cumsum([0, *(len(p.rewards) for p in parts)])
    boots = [p.bootstrap for p in parts if p.bootstrap is not None]
    assert len(boots) == len(parts)
    pieces = [
        (t + int(o), i, obs) for b, o in zip(boots, offsets, strict=False) for t, i, obs in b.pieces
    ]
    ended = np.concatenate([b.ended for b in boots])
    return Rollout(**columns, bootstrap=Bootstrap(boots[-1].last_obs, ended, pieces))


def time_slice(rollout: Rollout, start: int) -> Rollout:
    """The rollout from step `start` on."""
    b = rollout.bootstrap
    assert b is not None
    columns = {name: getattr(rollout, name)[start:] for name in COLUMNS}
    pieces = [(t - start, i, obs) for t, i, obs in b.pieces if t >= start]
    return Rollout(**columns, bootstrap=Bootstrap(b.last_obs, b.ended[start:], pieces))


def dimension_log_probs(
    policy: Member, rollout: Rollout, features: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> Rollout:
    """The buffer with its actions' log-probabilities per dimension, (T, n, actions).

    Computed by the member as it acted (the same weights and normaliser statistics: before the
    normaliser takes the buffer in, or the `features` of its rows as they were acted): what
    `ratio=per_dimension` compares each dimension with.
    """
    steps, n = rollout.rewards.shape
    obs = rollout.obs.reshape(steps * n, -1)
    with torch.no_grad():
        x = policy.features(obs.to(policy.device)) if features is None else features(obs)
        mean = policy.mean_from(x)
        actions = rollout.actions.reshape(steps * n, -1).to(mean.device)
        per_dimension = gaussian_log_prob(actions, mean, policy.log_std, per_dimension=True)
    return replace(rollout, log_probs=per_dimension.cpu().reshape(steps, n, -1))
