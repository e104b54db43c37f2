"""meta-eval on a run with a game: adaptation by self-play, win rates against references."""

from __future__ import annotations

import csv
from collections.abc import Callable

import torch
from omegaconf import OmegaConf

import envs
from envs.interface import TaskEnvironment
from meta.algorithm.ppo.network import policy_for
from meta.config import Config
from meta.config.ppo import NetworkConfig
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.evaluation.games import RANDOM, play_match, reference_policy
from meta.trainer import train

THREE = (
    "meta.tasks=[{name: FindTarget, weight: 1}, {name: CarryObject, weight: 1}, "
    "{name: Sumo, weight: 1}]"
)
TINY_EVAL = (
    "eval.budgets=[0,1]",
    "eval.seeds=1",
    "eval.tasks_per_family=1",
    "eval.buffer_size=128",
    "eval.eval_episodes=16",
    "eval.bootstrap_samples=200",
)


def test_games_are_measured_by_win_rates_against_random_and_theta(
    tiny_config: Callable[..., Config],
) -> None:
    overrides = ("ppo=selfplay", "experiment=tiny", THREE, "meta.steps=1")
    run_dir = train(tiny_config(*overrides), "games")
    evaluate(plan_eval(tiny_config(*overrides, "run_id=games", *TINY_EVAL), "games"))
    with (run_dir / "eval" / "adaptation.csv").open() as f:
        rows = list(csv.DictReader(f))
    # 3 starts x 3 families x 2 splits x 1 task x 1 seed x 2 budgets
    assert len(rows) == 36
    games = [r for r in rows if r["family"] == "Sumo"]
    assert len(games) == 12 and {r["method"] for r in games} == {"reptile", "scratch", "joint"}
    for row in games:
        assert float(row["success"]) == float(row["win_rate_random"])
        assert 0.0 <= float(row["win_rate_theta"]) <= 1.0 and int(row["episodes"]) == 16
        assert 0.0 <= float(row["win_rate_reference"]) <= 1.0
    # theta against itself, unadapted: a symmetric game (wins only, draws and losses apart)
    start = [r for r in games if r["method"] == "reptile" and r["budget"] == "0"]
    assert start and all(float(r["win_rate_theta"]) < 1.0 for r in start)
    others = [r for r in rows if r["family"] != "Sumo"]
    assert all(
        r["win_rate_random"] == r["win_rate_theta"] == r["win_rate_reference"] == "" for r in others
    )  # NaN
    joint = OmegaConf.load(run_dir / "eval" / "joint" / "configuration.yaml")
    assert [t.name for t in joint.meta.tasks] == ["FindTarget", "CarryObject"]


def test_play_match_counts_one_game_per_area_from_the_policys_side() -> None:
    env = envs.make("Sumo", num_areas=40, seed=0, max_step=30)
    policy = policy_for(env, NetworkConfig(hidden_units=8), seed=1)
    result = play_match(env, policy, RANDOM, seed=2)
    assert result.games == 40 and result.wins + result.draws + result.losses == 40
    again = envs.make("Sumo", num_areas=40, seed=0, max_step=30)
    assert play_match(again, policy, RANDOM, seed=2) == result  # same seeds, same games
    mirror = play_match(env, policy, policy, seed=3)
    assert mirror.games == 40
    with torch.no_grad():
        for p in policy.actor.parameters():
            p.zero_()
    # a policy that stands still against itself: nobody moves out, every game a draw
    policy.log_std.data.fill_(-30.0)
    still = play_match(env, policy, policy, seed=4)
    assert (still.wins, still.draws, still.losses) == (0, 40, 0)


def test_matches_follow_deterministic_and_the_reference_is_a_fixed_player() -> None:
    def fresh() -> TaskEnvironment:
        return envs.make("Sumo", num_areas=64, seed=3)

    reference = reference_policy(fresh())
    policy = policy_for(fresh(), NetworkConfig(hidden_units=8), seed=1)
    # deterministic: the same games whatever the match seed; sampled: they differ
    assert play_match(fresh(), policy, policy, 1, True) == play_match(
        fresh(), policy, policy, 2, True
    )
    assert play_match(fresh(), policy, policy, 1) != play_match(fresh(), policy, policy, 2)
    # the committed reference beats a random policy and an untrained one
    assert play_match(fresh(), reference, RANDOM, 0, True).win_rate > 0.9
    assert play_match(fresh(), reference, policy, 0, True).win_rate > 0.9
