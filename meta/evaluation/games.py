"""meta-eval for games of teams: adaptation by the ghost trainer, win rates against references.

After each budget the adapted policy plays one game per area (eval.eval_episodes areas) against
two fixed opponents: a policy moving uniformly at random, and the run's meta-learned weights
(the initial theta every method is compared against). Its success is the win rate against the
random policy, its mean reward the mean result there (+1 win, 0 draw, -1 loss).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.policy import Policy
from meta.algorithm.ppo.train import policy_for
from meta.algorithm.reptile import Task
from meta.algorithm.selfplay.match import RANDOM, play_match
from meta.algorithm.selfplay.trainer import ghost_train
from meta.runtime.envpool import EnvPool

Weights = dict[str, torch.Tensor]
OnUpdate = Callable[[int, Mapping[str, float]], None]


def is_game(family: str) -> bool:
    """Whether a family is a game of teams."""
    import envs

    return envs.family(family).adversarial


def adapt_game(
    env: AgentEnvironment, policy: Policy, ppo: PPOConfig, seed: int, on_update: OnUpdate
) -> None:
    """Adapt `policy` in place with the ghost trainer (its snapshots start from the policy)."""
    if ppo.self_play is None:
        raise ValueError("a game of teams adapts with self-play: the run has no ppo.self_play")
    start = Hyper.of(ppo)
    ghost_train(
        env,
        policy,
        ppo,
        seed=seed,
        schedule=lambda steps: start.after(ppo, steps, ppo.max_steps),
        optimizer=make_optimizer(policy, ppo.learning_rate, ppo.optimizer),
        on_update=on_update,
    )


def measure_game(
    pool: EnvPool,
    task: Task,
    policy: Policy,
    reference: Weights | None,
    network: NetworkConfig,
    games: int,
    seed: int,
) -> tuple[float, float, int, float, float]:
    """Mean result and win rate against random, games played, win rates (random, theta)."""
    env = pool.env(task.family, task.params, seed, games)
    try:
        versus_random = play_match(env, policy, RANDOM, seed)
        versus_theta = float("nan")
        if reference is not None:
            theta = policy_for(env, network).to(next(policy.parameters()).device)
            theta.load_state_dict(reference)
            versus_theta = play_match(env, policy, theta, seed).win_rate
    finally:
        pool.release(env)
    mean = (versus_random.wins - versus_random.losses) / versus_random.games
    rate = versus_random.win_rate
    return mean, rate, versus_random.games, rate, versus_theta
