"""Matches against fixed reference opponents: one game per area, the policy as team 0."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.policy import Policy
from meta.algorithm.selfplay.trainer import team_behaviors

Move = Callable[[np.ndarray, torch.Generator], np.ndarray]
"""A team's moves for its observations, drawn from the generator where they are sampled."""
RANDOM = "random"
"""The reference opponent that moves uniformly at random in [-1, 1]^2."""


@dataclass(frozen=True)
class MatchResult:
    """Outcomes of one game per area, from the policy's side."""

    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        """Games played."""
        return self.wins + self.draws + self.losses

    @property
    def win_rate(self) -> float:
        """Fraction of the games won."""
        return self.wins / self.games if self.games else float("nan")


def play_match(
    env: AgentEnvironment,
    policy: Policy,
    opponent: Policy | str,
    seed: int,
    deterministic: bool = False,
) -> MatchResult:
    """The policy (team 0) against `opponent` (team 1: a policy or RANDOM), a game per area.

    `deterministic`: both policies play their mean action (RANDOM stays uniform).
    """
    names = team_behaviors(env)
    generator = torch.Generator().manual_seed(seed)
    ours = _player(policy, deterministic)
    theirs = _player(opponent if isinstance(opponent, Policy) else None, deterministic)
    env.reset()
    obs = [env.get_steps(name)[0].obs[0] for name in names]
    ids = env.get_steps(names[0])[0].agent_id
    n = len(ids)
    outcome = np.full(n, np.nan)
    order = np.argsort(ids)
    with torch.inference_mode():
        while np.isnan(outcome).any():
            moves = [ours(obs[0], generator), theirs(obs[1], generator)]
            for name, move in zip(names, moves, strict=True):
                env.set_actions(name, ActionTuple(continuous=move))
            env.step()
            steps = [env.get_steps(name) for name in names]
            terminal = steps[0][1]
            if len(terminal):
                rows = order[np.searchsorted(ids[order], terminal.agent_id)]
                first = np.isnan(outcome[rows])
                outcome[rows[first]] = np.sign(terminal.reward[first])
            obs = [decision.obs[0] for decision, _ in steps]
    return MatchResult(
        int((outcome > 0).sum()), int((outcome == 0).sum()), int((outcome < 0).sum())
    )


def _player(policy: Policy | None, deterministic: bool) -> Move:
    """A team's moves: the policy's sampled actions or, when deterministic, its mean ones;
    uniform ones without a policy."""
    frozen = None if policy is None else policy.frozen()

    def move(obs: np.ndarray, generator: torch.Generator) -> np.ndarray:
        if policy is None or frozen is None:
            uniform = torch.rand((len(obs), 2), generator=generator) * 2.0 - 1.0
            return uniform.numpy().astype(np.float32)
        x = torch.from_numpy(obs).to(policy.device)
        acted = (
            policy.act(x, generator, deterministic=True)
            if deterministic
            else frozen.act(x, generator)
        )
        return np.clip(acted[0].cpu().numpy(), -1.0, 1.0).astype(np.float32)

    return move
