"""ML-Agents' normaliser under `ppo.buffer_assembly=pieces`: each piece taken in as it completes.

ML-Agents' trainer processes a trajectory piece as soon as the step that completes it is in
(`_process_trajectory`): it updates the normaliser with the piece's observations, then
estimates the piece's values with those statistics, and the policy acts the next steps with
them. The pieces one step completes go in one after another: those an episode's end cut
first, then those cut at `time_horizon`, each in agent order (the order
`AgentProcessor.add_experiences` emits them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from meta.algorithm.ppo.network import Member
from meta.algorithm.ppo.rollout import Rollout


class PieceNormaliser:
    """The moments of each agent's begun piece, taken into the policy's normaliser at its cut.

    It records every state the normaliser passes through during a buffer (`snapshots`), which
    state each step was acted with and which each piece was valued with, so that the buffer's
    values and log-probabilities are computed once, batched, when it is complete. Its
    bookkeeping stays on the CPU, where the collector's observations are, whatever the
    policy's device.
    """

    def __init__(self, policy: Member, agents: int, prior: int) -> None:
        self.policy, self.prior = policy, prior
        size = policy.mean.shape[0]
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
        norm = self.policy
        norm.prime(self.prior)
        self.at = at
        self.snapshots = [(norm.mean[None].cpu().clone(), norm.var[None].cpu().clone())]
        self.known, self.acted, self.ends = 1, [], []

    def step(self, obs: torch.Tensor, cut: np.ndarray, ended: np.ndarray) -> bool:
        """Take in the pieces a step completes (a Collector's StepHook); True if any."""
        self.acted.append(self.known - 1)
        at, self.at = self.at, self.at + 1
        x = obs.double()
        self.count += 1.0
        self.sum += x
        self.square += x.square()
        agents = np.concatenate([np.flatnonzero(ended), np.flatnonzero(cut & ~ended)])
        if len(agents) == 0:
            return False
        rows = torch.from_numpy(agents)
        norm = self.policy
        seen, mean, var = float(norm.count), norm.mean.cpu().double(), norm.var.cpu().double()
        counts = seen + torch.cumsum(self.count[rows], 0)[:, None]
        means = (seen * mean + torch.cumsum(self.sum[rows], 0)) / counts
        squares = seen * (var + mean.square()) + torch.cumsum(self.square[rows], 0)
        variances = (squares / counts - means.square()).clamp_min(0.0)
        self.snapshots.append((means.float(), variances.float()))
        self.ends.append((at, agents, np.arange(self.known, self.known + len(agents))))
        self.known += len(agents)
        norm.mean.copy_(means[-1])
        norm.var.copy_(variances[-1])
        norm.count.fill_(float(counts[-1, 0]))
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

    def acted_features(self, fresh: Rollout) -> Callable[[torch.Tensor], torch.Tensor]:
        """The features of `fresh`'s observations (the steps this buffer took, as rows) by the
        normaliser each step was acted with."""
        snapshot = torch.tensor(self.acted).repeat_interleave(fresh.rewards.shape[1])
        return lambda obs: self.features(obs, snapshot)

    def valued(self, buffer: Rollout) -> Rollout:
        """The buffer's values and next-state values, each piece's by the policy now with the
        normaliser right after the piece went in."""
        assert buffer.valid is not None and buffer.bootstrap is not None
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
        slot = torch.full((steps, n), -1, dtype=torch.int64)
        slot[at, agents] = torch.arange(pieces)
        for t, rows, last in buffer.bootstrap.pieces:  # time-outs: from their last observation
            where = slot[t, torch.from_numpy(rows)]
            kept = where >= 0  # the carry's time-outs were valued with the last buffer
            final[where[kept]] = torch.from_numpy(last)[kept]
            terminal[where[kept]] = False
        with torch.no_grad():
            own = self.policy.value_from(self.features(buffer.obs[buffer.valid], snapshot[owner]))
            ahead = self.policy.value_from(self.features(final, snapshot))
        values = torch.zeros(steps, n)
        values[buffer.valid] = own.cpu()
        next_values = torch.cat([values[1:], torch.zeros(1, n)])
        next_values[at, agents] = torch.where(terminal, 0.0, ahead.cpu())
        return replace(buffer, values=values, next_values=next_values)
