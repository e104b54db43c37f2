"""Self-play in meta-train: the ghost trainer inside Reptile and single, ELO, resume, refusals."""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from mlagents_envs.base_env import BehaviorSpec, ObservationSpec
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator, ScalarEvent

import envs
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.request import TrainRequest
from meta.algorithm.training import train as train_request
from meta.config import Config
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.evaluation import reference
from meta.evaluation.games import RANDOM, play_match
from meta.trainer import MetaTrainer, plan_training, train
from meta.trainer.preflight import check_specs

Factory = Callable[..., Config]
THREE = (
    "meta.tasks=[{name: FindTarget, weight: 1}, {name: CarryObject, weight: 1}, "
    "{name: Sumo, weight: 1}]"
)
SELF_PLAY = ("ppo=selfplay", "experiment=tiny")  # tiny again: ppo=selfplay restores ppo defaults
GHOST = (  # counters small enough to save, swap and change teams within the tiny budget
    "ppo.self_play.save_steps=300",
    "ppo.self_play.swap_steps=100",
    "ppo.self_play.team_change=700",
    "ppo.self_play.window=3",
)


def scalars(log_dir: Path, tag: str) -> list[ScalarEvent]:
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return events.Scalars(tag) if tag in events.Tags()["scalars"] else []


def step_of(point: ScalarEvent) -> int:
    return point.step


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "meta_steps.csv").open() as f:
        return list(csv.DictReader(f))


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "run_logs/training_status.json").read_text())


@pytest.mark.slow
def test_ghost_trainer_learns_to_beat_a_random_opponent_and_gains_elo() -> None:
    """Sumo's default task, 500k learning-team agent-steps: >= 80% wins, >= 80% of the games
    decided, ELO +150 (K = 1), rising from each summary period to the next.

    Budget: 64 areas, 500,000 learning-team agent-steps (about 8,800 games of at most 100
    steps), buffers of 4,096, batches of 512, learning rate 1e-3, 64 hidden units, ML-Agents'
    self_play defaults (save_steps 20000, swap_steps 2000, team_change 100000, window 10,
    ratio 0.5).
    """
    network, env = reference.NETWORK, envs.make("Sumo", num_areas=64, seed=1)
    started = time.perf_counter()
    result, theta = reference.train(seed=0)
    wall = time.perf_counter() - started
    trained = policy_for(env, network)
    trained.load_state_dict(result.weights)
    games = envs.make("Sumo", num_areas=500, seed=99)
    versus_random = play_match(games, trained, RANDOM, seed=5)
    start = policy_for(env, network)
    start.load_state_dict(theta)
    before = play_match(games, start, RANDOM, seed=5)
    assert result.self_play_state is not None
    elo = result.self_play_state["elo"]
    print(f"{wall:.1f} s; wins vs random {versus_random} (theta: {before}); ELO {elo:.1f}")
    assert versus_random.win_rate >= 0.8 > before.win_rate
    assert elo >= 1200.0 + 150.0 and result.stats["Self-play/Decisive Share"] >= 0.8
    assert result.stats["Self-play/ELO"] == elo and result.stats["games"] > 1000
    means = [mean for _, _, mean in result.self_play_state["summaries"]]
    assert len(means) >= 10 and means == sorted(means)
    committed = torch.load(reference.OUT, weights_only=True)
    if committed["made_on"] == reference.machine():  # the same training makes the same weights
        assert all(torch.equal(w, result.weights[k]) for k, w in committed["weights"].items())
    else:  # other CPU kernels round differently: the committed player must still win here
        made = policy_for(env, NetworkConfig(**committed["network"]))
        made.load_state_dict(committed["weights"])
        assert play_match(games, made, RANDOM, seed=5).win_rate >= 0.8


def test_a_game_without_self_play_settings_is_refused_before_training() -> None:
    env = envs.make("Sumo", num_areas=4)
    theta = policy_for(env, NetworkConfig()).state_dict()
    with pytest.raises(ValueError, match=r"have team ids but ppo\.self_play is not set"):
        train_request(TrainRequest((), theta, 0, PPOConfig(max_steps=20480), NetworkConfig()), env)


def test_three_families_meta_train_with_elo_and_resume_bitwise(tiny_config: Factory) -> None:
    overrides = (*SELF_PLAY, THREE, "meta.meta_batch_size=3", "meta.steps=4")
    straight = train(tiny_config(*overrides), "straight")
    trainer = MetaTrainer(plan_training(tiny_config(*overrides), "cut"), "{}", {})
    trainer.meta_step_once(0)
    trainer.meta_step_once(1)
    trainer.close()
    cut_elo = status(trainer.run_dir)["Brain"]["elo"]
    resumed = train(tiny_config(*overrides, "resume=true"), "cut")
    a, b = weights(straight / "Brain.pt"), weights(resumed / "Brain.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    table = rows(straight)
    assert {r["task"] for r in table} == {"FindTarget", "CarryObject", "Sumo"}
    assert [r["elo"] for r in table] == [r["elo"] for r in rows(resumed)]
    elo = status(straight)["Brain"]["elo"]  # ML-Agents' StatusType.ELO under the behavior
    assert elo == status(resumed)["Brain"]["elo"] != 1200.0
    assert float(table[-1]["elo"]) == elo and cut_elo == float(table[5]["elo"])
    sumo = [r for r in table if r["task"] == "Sumo"]
    assert all(0.0 <= float(r["success_rate"]) <= 1.0 for r in sumo)
    points = scalars(straight / "tensorboard", "Self-play/ELO")
    assert points and {p.step for p in points} <= {0, 1, 2, 3}  # games' meta-steps only
    state = torch.load(straight / "Brain/checkpoint.pt", weights_only=True)
    assert state["self_play"] == {"elo": elo}  # Reptile keeps the rating, not a ghost


def test_single_continues_its_ghost_across_chunks_and_resumes_it_exactly(
    tiny_config: Factory,
) -> None:
    overrides = (*SELF_PLAY, *GHOST, "meta=single", "meta.tasks=[{name: Sumo}]", "meta.steps=3")
    straight = train(tiny_config(*overrides), "straight")
    trainer = MetaTrainer(plan_training(tiny_config(*overrides), "cut"), "{}", {})
    trainer.meta_step_once(0)
    trainer.close()
    cut = torch.load(trainer.run_dir / "Brain/checkpoint.pt", weights_only=True)["self_play"]
    assert len(cut["ghost"]["snapshots"]) == 3 and cut["ghost"]["step"] == 1024
    resumed = train(tiny_config(*overrides, "resume=true"), "cut")
    a, b = weights(straight / "Brain.pt"), weights(resumed / "Brain.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    ghosts = [
        torch.load(run / "Brain/checkpoint.pt", weights_only=True)["self_play"]
        for run in (straight, resumed)
    ]
    assert ghosts[0]["elo"] == ghosts[1]["elo"] == status(resumed)["Brain"]["elo"]
    one, two = ghosts[0]["ghost"], ghosts[1]["ghost"]
    assert one["policy_elos"] == two["policy_elos"] and one["step"] == 3 * 1024
    assert one["learning_team"] == two["learning_team"]
    for x, y in zip(one["snapshots"], two["snapshots"], strict=True):
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert torch.equal(one["generator"], two["generator"])
    assert "summaries" not in ghosts[0]  # written to the writers, not carried on


def test_elo_is_written_per_summary_period_and_the_decisive_share_per_meta_step(
    tiny_config: Factory,
) -> None:
    overrides = (*SELF_PLAY, "meta=single", "meta.tasks=[{name: Sumo}]", "meta.steps=3")
    run = train(tiny_config(*overrides, "ppo.summary_freq=256"), "periods")
    table = rows(run)
    # 16 areas: 1024 learning-team agent-steps (64 env steps) per meta-step, 4 periods each
    per_period = scalars(run / "tensorboard" / "env_steps", "EnvSteps/Self-play/ELO")
    steps = [p.step for p in per_period]
    assert len(steps) > 3 and steps == sorted(set(steps))
    assert set(steps) <= {256 * k for k in range(1, 13)}
    per_step = scalars(run / "tensorboard", "Self-play/ELO")
    for point in per_step:  # a meta-step's point is its last period's
        last = max((p for p in per_period if p.step <= 1024 * (point.step + 1)), key=step_of)
        assert last.step > 1024 * point.step and point.value == last.value
    # the run's rating after each meta-step stays in meta_steps.csv and the status
    assert float(table[-1]["elo"]) == status(run)["Brain"]["elo"]
    assert float(table[-1]["elo"]) != per_step[-1].value
    share = [float(r["decisive_share"]) for r in table]
    assert all(0.0 <= x <= 1.0 for x in share)
    tagged = scalars(run / "tensorboard", "Self-play/Decisive Share")
    assert [p.value for p in tagged] == pytest.approx(share)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("meta.tasks=[{name: Sumo}]",),
            "task Sumo is a game of teams .* ppo.self_play is not set",
        ),
        ((*SELF_PLAY, "meta=joint", THREE), "meta=joint cannot put the game Sumo"),
        ((*SELF_PLAY, "ppo.self_play.window=0"), r"ppo.self_play.window must be >= 1, got 0"),
        (
            (*SELF_PLAY, "ppo.self_play.play_against_latest_model_ratio=1.2"),
            r"play_against_latest_model_ratio must be in \[0, 1\], got 1.2",
        ),
        ((*SELF_PLAY, "ppo.self_play.save_steps=0"), "ppo.self_play.save_steps must be > 0"),
        ((*SELF_PLAY, "ppo.self_play.swap_steps=-1"), "ppo.self_play.swap_steps must be > 0"),
        ((*SELF_PLAY, "ppo.self_play.team_change=0"), "ppo.self_play.team_change must be > 0"),
        ((*SELF_PLAY, "ppo.summary_freq=0"), "ppo.summary_freq must be > 0"),
        (
            (*SELF_PLAY, "meta.tasks=[{name: Sumo, params: {arena_shrink: -0.1}}]"),
            r"Sumo parameter arena_shrink=-0.1 is outside \[0, 1\]",
        ),
        (
            (*SELF_PLAY, "meta.tasks=[{name: Sumo, params: {arena_shrink: 1.5}}]"),
            r"Sumo parameter arena_shrink=1.5 is outside \[0, 1\]",
        ),
    ],
)
def test_bad_self_play_input_is_refused_before_the_run_exists(
    tiny_config: Factory, tmp_path: Path, overrides: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as error:
        plan_training(tiny_config(*overrides), "bad")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "results" / "bad").exists()


def test_a_family_whose_specs_differ_is_refused() -> None:
    same = {name: dict(envs.make(name).behavior_specs) for name in envs.FAMILIES}
    check_specs(same)
    spec = same["FindTarget"]["Brain"]
    wider = BehaviorSpec([ObservationSpec((12,), *spec.observation_specs[0][1:])], spec.action_spec)
    with pytest.raises(ValueError, match=r"task Wide: behavior Brain has observations \[\(12,\)\]"):
        check_specs({**same, "Wide": {"Brain": wider}})


def test_elo_is_nan_in_rows_without_games(tiny_config: Factory) -> None:
    run = train(tiny_config("meta.steps=1"), "plain")
    assert math.isnan(float(rows(run)[0]["elo"])) and "elo" not in status(run)["Brain"]
