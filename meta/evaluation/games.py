"""meta-eval for games of teams: adaptation by the ghost trainer, win rates against references.

After each budget the adapted policy plays one game per area (eval.eval_episodes areas) against
three opponents: a policy moving uniformly at random, the run's meta-learned weights (the
initial theta every method is compared against) and a fixed reference policy committed with
the project (the same for every run, so that two runs' results compare). Policies play their
mean action when eval.deterministic is set, as in the other families' episodes. Its success is
the win rate against the random policy, its mean reward the mean result there (+1 win, 0 draw,
-1 loss).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.network import Policy, policy_for
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.request import Task
from meta.algorithm.selfplay.trainer import team_behaviors
from meta.config.ppo import NetworkConfig
from meta.evaluation.episodes import policy_actor
from meta.runtime.envpool import EnvPool

REFERENCE = Path(__file__).resolve().parent / "references" / "Sumo.pt"
"""The fixed reference player every run's games are also measured against (so runs compare)."""
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
    if policy is None:
        return lambda obs, g: (torch.rand((len(obs), 2), generator=g) * 2.0 - 1.0).numpy()
    if deterministic:
        greedy = policy_actor(policy, True, torch.Generator())
        return lambda obs, _: np.clip(greedy(obs), -1.0, 1.0).astype(np.float32)
    frozen = policy.frozen()

    def move(obs: np.ndarray, generator: torch.Generator) -> np.ndarray:
        acted = frozen.act(torch.from_numpy(obs).to(policy.device), generator)
        return np.clip(acted[0].cpu().numpy(), -1.0, 1.0).astype(np.float32)

    return move


class GameScores(NamedTuple):
    """An adapted policy's games: mean result and win rate against random, and the others."""

    mean_reward: float
    success: float
    games: int
    win_rate_random: float
    win_rate_theta: float
    win_rate_reference: float


def reference_policy(env: AgentEnvironment, path: Path = REFERENCE) -> Policy:
    """The fixed reference player of games, as committed (its own network settings)."""
    saved = torch.load(path, weights_only=True)
    policy = policy_for(env, NetworkConfig(**saved["network"]))
    policy.load_state_dict(saved["weights"])
    return policy


def measure_game(
    pool: EnvPool,
    task: Task,
    policy: Policy,
    reference: Weights | None,
    network: NetworkConfig,
    games: int,
    seed: int,
    deterministic: bool = True,
) -> GameScores:
    """One game per area against random, the run's theta (`reference`) and the fixed reference."""
    env = pool.env(task.family, task.params, seed, games)
    device = next(policy.parameters()).device
    try:
        versus_random = play_match(env, policy, RANDOM, seed, deterministic)
        versus_theta = float("nan")
        if reference is not None:
            theta = policy_for(env, network).to(device)
            theta.load_state_dict(reference)
            versus_theta = play_match(env, policy, theta, seed, deterministic).win_rate
        fixed = reference_policy(env).to(device)
        versus_fixed = play_match(env, policy, fixed, seed, deterministic).win_rate
    finally:
        pool.release(env)
    mean = (versus_random.wins - versus_random.losses) / versus_random.games
    rate = versus_random.win_rate
    return GameScores(mean, rate, versus_random.games, rate, versus_theta, versus_fixed)


def game_columns(scores: GameScores | None) -> dict[str, float]:
    """adaptation.csv's win-rate columns of a measurement (NaN for a family without teams)."""
    nan = float("nan")
    if scores is None:
        return dict.fromkeys(("win_rate_random", "win_rate_theta", "win_rate_reference"), nan)
    return {
        "win_rate_random": scores.win_rate_random,
        "win_rate_theta": scores.win_rate_theta,
        "win_rate_reference": scores.win_rate_reference,
    }
