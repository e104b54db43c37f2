"""ML-Agents' buffer assembly (`ppo.buffer_assembly=pieces`): buffers of whole trajectory pieces.

Every agent still steps as one array: the collector steps all agents until the completed
pieces exceed `buffer_size`, and the buffer is the (T, n) window of those steps with a mask of
each agent's pieces (docs/mlagents-fidelity.md, rows 2 and 8, says what ML-Agents does).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from meta.algorithm.ppo.network import NORMALIZER, PolicyStack, gaussian_log_prob
from meta.algorithm.ppo.rollout import Bootstrap, Collector, Rollout
from meta.config.ppo import PPOConfig

COLUMNS = ("obs", "actions", "log_probs", "values", "rewards", "next_values", "boundaries")


class PieceCollector:
    """A Collector's steps assembled into buffers of whole pieces, as ML-Agents' trainer does."""

    def __init__(self, collector: Collector, policy: PolicyStack, cfg: PPOConfig) -> None:
        self.collector, self.policy = collector, policy
        self.num_agents, self.episodes = collector.num_agents, collector.episodes
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
        if self.per_dimension and normaliser is not None:  # each step's by what it acted with
            acted = torch.tensor(normaliser.acted).repeat_interleave(n)
            features = normaliser.features(fresh.obs.flatten(0, 1), acted)
            fresh = dimension_log_probs(self.policy, fresh, features)
        whole = concat([*carried, fresh])
        t = np.arange(window)[:, None]
        buffer = replace(whole, valid=torch.from_numpy((t >= self.first) & (t <= last)))
        if normaliser is not None:
            buffer = normaliser.valued(buffer)
        start = int((last + 1).min())
        self.carry = time_slice(buffer, start) if start < window else None
        self.first = last + 1 - start
        return buffer


class PieceNormaliser:
    """The moments of each agent's begun piece, taken into the policy's normaliser at its cut.

    It records every state the normaliser passes through during a buffer (`snapshots`), which
    state each step was acted with and which each piece was valued with, so that the buffer's
    values and log-probabilities are computed once, batched, when it is complete. Its
    bookkeeping stays on the CPU, where the collector's observations are, whatever the
    policy's device.
    """

    def __init__(self, policy: PolicyStack, agents: int, prior: int) -> None:
        self.policy, self.prior = policy, prior
        self.mean, self.var, self.count_seen = (policy.buffers[key][0] for key in NORMALIZER)
        size = self.mean.shape[0]
        self.count = torch.zeros(agents, dtype=torch.float64)
        self.sum = torch.zeros(agents, size, dtype=torch.float64)
        self.square = torch.zeros(agents, size, dtype=torch.float64)
        self.at, self.known = 0, 0
        self.snapshots: list[tuple[torch.Tensor, torch.Tensor]] = []
        """Every state the normaliser was in during the buffer: (states, obs) means, variances."""
        self.acted: list[int] = []
        """Per step taken, the snapshot it was acted with."""
        self.ends: list[tuple[int, np.ndarray, np.ndarray]] = []
        """Per step that completed pieces: its window step, their agents and snapshots."""

    def begin(self, at: int) -> None:
        """A new buffer whose first step not yet taken is window step `at`."""
        self.policy.prime(self.prior)
        self.at = at
        self.snapshots = [(self.mean[None].cpu().clone(), self.var[None].cpu().clone())]
        self.known, self.acted, self.ends = 1, [], []

    def step(self, obs: torch.Tensor, cut: np.ndarray, ended: np.ndarray) -> bool:
        """Take in the pieces a step completes (a Collector's StepHook); True if any."""
        self.acted.append(self.known - 1)
        at, self.at = self.at, self.at + 1
        x = obs.double()
        self.count += 1.0
        self.sum += x
        self.square += x.square()
        # those an episode's end cut first, then those cut at time_horizon, each in agent order
        # (the order ML-Agents' AgentProcessor.add_experiences emits them)
        agents = np.concatenate([np.flatnonzero(ended), np.flatnonzero(cut & ~ended)])
        if len(agents) == 0:
            return False
        rows = torch.from_numpy(agents)
        seen, mean, var = float(self.count_seen), self.mean.cpu().double(), self.var.cpu().double()
        counts = seen + torch.cumsum(self.count[rows], 0)[:, None]
        means = (seen * mean + torch.cumsum(self.sum[rows], 0)) / counts
        squares = seen * (var + mean.square()) + torch.cumsum(self.square[rows], 0)
        variances = (squares / counts - means.square()).clamp_min(0.0)
        self.snapshots.append((means.float(), variances.float()))
        self.ends.append((at, agents, np.arange(self.known, self.known + len(agents))))
        self.known += len(agents)
        self.mean.copy_(means[-1])
        self.var.copy_(variances[-1])
        self.count_seen.fill_(float(counts[-1, 0]))
        self.count[rows] = 0.0
        self.sum[rows] = 0.0
        self.square[rows] = 0.0
        return True

    def features(self, obs: torch.Tensor, snapshot: torch.Tensor) -> torch.Tensor:
        """Observations normalised as by the normaliser in each row's snapshot."""
        mean = torch.cat([m for m, _ in self.snapshots])[snapshot]
        var = torch.cat([v for _, v in self.snapshots])[snapshot]
        x = (obs - mean) * torch.rsqrt(var + self.policy.epsilon)
        return x.clamp(-5.0, 5.0).to(self.policy.device)

    def valued(self, buffer: Rollout) -> Rollout:
        """The buffer's values and next-state values, each piece's by the policy now with the
        normaliser right after the piece went in."""
        assert buffer.valid is not None
        steps, n = buffer.rewards.shape
        at = torch.from_numpy(np.concatenate([np.full(len(a), t) for t, a, _ in self.ends]))
        agents = torch.from_numpy(np.concatenate([a for _, a, _ in self.ends]))
        snapshot = torch.from_numpy(np.concatenate([s for _, _, s in self.ends]))
        pieces = len(agents)
        numbered = torch.full((steps, n), pieces, dtype=torch.int64)
        numbered[at, agents] = torch.arange(pieces)
        # a step's piece is the first to end at or after it (pieces are numbered in time order)
        owner = numbered.flip(0).cummin(0).values.flip(0)[buffer.valid]
        final = torch.cat([buffer.obs[1:], buffer.bootstrap.last_obs[None]])[at, agents]
        terminal = torch.from_numpy(buffer.bootstrap.ended)[at, agents]
        for t, rows, last in buffer.bootstrap.pieces:  # time-outs: from their last observation
            where = numbered[t, torch.from_numpy(rows)]
            kept = where < pieces  # the carry's time-outs were valued with the last buffer
            final[where[kept]] = torch.from_numpy(last)[kept]
            terminal[where[kept]] = False
        with torch.no_grad():
            own = self.policy.value_from(
                self.features(buffer.obs[buffer.valid], snapshot[owner])[None]
            )[0]
            ahead = self.policy.value_from(self.features(final, snapshot)[None])[0]
        values = torch.zeros(steps, n)
        values[buffer.valid] = own.cpu()
        next_values = torch.cat([values[1:], torch.zeros(1, n)])
        next_values[at, agents] = torch.where(terminal, 0.0, ahead.cpu())
        return replace(buffer, values=values, next_values=next_values)


def concat(parts: list[Rollout]) -> Rollout:
    """Consecutive rollouts of the same agents as one, along time."""
    if len(parts) == 1:
        return parts[0]
    columns = {name: torch.cat([getattr(p, name) for p in parts]) for name in COLUMNS}
    offsets = np.cumsum([0, *(len(p.rewards) for p in parts)])
    boots = [p.bootstrap for p in parts]
    pieces = [
        (t + int(o), i, obs) for b, o in zip(boots, offsets, strict=False) for t, i, obs in b.pieces
    ]
    ended = np.concatenate([b.ended for b in boots])
    return Rollout(**columns, bootstrap=Bootstrap(boots[-1].last_obs, ended, pieces))


def time_slice(rollout: Rollout, start: int) -> Rollout:
    """The rollout from step `start` on."""
    b = rollout.bootstrap
    columns = {name: getattr(rollout, name)[start:] for name in COLUMNS}
    pieces = [(t - start, i, obs) for t, i, obs in b.pieces if t >= start]
    return Rollout(**columns, bootstrap=Bootstrap(b.last_obs, b.ended[start:], pieces))


def dimension_log_probs(
    policy: PolicyStack, rollout: Rollout, features: torch.Tensor | None = None
) -> Rollout:
    """The buffer with its actions' log-probabilities per dimension, (T, n, actions).

    Computed by the member as it acted (the same weights and normaliser statistics: before the
    normaliser takes the buffer in, or the `features` of its rows as they were acted): what
    `ratio=per_dimension` compares each dimension with.
    """
    steps, n = rollout.rewards.shape
    obs = rollout.obs.reshape(steps * n, -1)
    with torch.no_grad():
        x = policy.features(obs.to(policy.device)[None])[0] if features is None else features
        mean = policy.mean_from(x[None])[0]
        actions = rollout.actions.reshape(steps * n, -1).to(mean.device)
        per_dimension = gaussian_log_prob(actions, mean, policy.log_std[0], per_dimension=True)
    return replace(rollout, log_probs=per_dimension.cpu().reshape(steps, n, -1))
