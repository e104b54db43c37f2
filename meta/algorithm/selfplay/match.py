"""Matches against fixed reference opponents: one game per area, the policy as team 0."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.policy import FrozenPolicy, Policy
from meta.algorithm.selfplay.trainer import team_behaviors

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
    ours = Player(policy, deterministic)
    theirs = Player(opponent, deterministic) if isinstance(opponent, Policy) else None
    env.reset()
    obs = [env.get_steps(name)[0].obs[0] for name in names]
    ids = env.get_steps(names[0])[0].agent_id
    n = len(ids)
    outcome = np.full(n, np.nan)
    order = np.argsort(ids)
    with torch.inference_mode():
        while np.isnan(outcome).any():
            moves = [_act(ours, obs[0], generator), _act(theirs, obs[1], generator)]
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


class Player:
    """A policy in a match: its sampled actions, or its mean ones when deterministic."""

    def __init__(self, policy: Policy, deterministic: bool) -> None:
        self.policy, self.deterministic = policy, deterministic
        self.frozen: FrozenPolicy = policy.frozen()
        self.device = next(policy.parameters()).device

    def act(self, obs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Actions for a batch of observations."""
        if self.deterministic:
            return self.policy.act(obs, generator, deterministic=True)[0]
        return self.frozen.act(obs, generator)[0]


def _act(player: Player | None, obs: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """A team's moves: the player's actions, or uniform ones without a player."""
    if player is None:
        uniform = torch.rand((len(obs), 2), generator=generator) * 2.0 - 1.0
        return uniform.numpy().astype(np.float32)
    action = player.act(torch.from_numpy(obs).to(player.device), generator)
    return np.clip(action.cpu().numpy(), -1.0, 1.0).astype(np.float32)
