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

from pathlib import Path
from typing import NamedTuple

import torch

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import NetworkConfig
from meta.algorithm.ppo.policy import Policy, policy_for
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.reptile import Task
from meta.algorithm.selfplay.match import RANDOM, play_match
from meta.runtime.envpool import EnvPool

REFERENCE = Path(__file__).resolve().parent / "references" / "Sumo.pt"
"""The fixed reference player every run's games are also measured against (so runs compare)."""


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
