"""envs/builds/Sumo through the real UnityEnvironment, and self-play over the unity backend."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.side_channel.environment_parameters_channel import (
    EnvironmentParametersChannel,
)
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

import envs
from envs.backend.unity_env import resolve_build
from envs.tasks.teams import TEAM_BEHAVIORS
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.request import TrainRequest
from meta.algorithm.training import train as train_request
from meta.config import Config
from meta.config.ppo import NetworkConfig, PPOConfig, SelfPlayConfig
from meta.trainer import Stopped, train

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*"),
]


def test_the_build_plays_the_native_game_bit_for_bit_and_trains_with_self_play(
    tmp_path: Path, free_ports: Callable[..., int]
) -> None:
    params, stats = EnvironmentParametersChannel(), StatsSideChannel()
    params.set_float_parameter("arena_size", 3.4)
    params.set_float_parameter("arena_shrink", 0.875)  # exact in float32, as the channel sends it
    build = UnityEnvironment(
        file_name=resolve_build("Sumo"),
        base_port=free_ports(),
        no_graphics=True,
        log_folder=str(tmp_path),
        side_channels=[params, stats],
        num_areas=6,
        seed=11,
        timeout_wait=20,
    )
    native = envs.make("Sumo", num_areas=6, seed=11, arena_size=3.4, arena_shrink=0.875)
    try:
        build.reset()
        assert list(build.behavior_specs) == list(TEAM_BEHAVIORS)
        assert dict(build.behavior_specs) == dict(native.behavior_specs)
        rng, games = np.random.default_rng(0), 0
        for _ in range(250):
            for name in TEAM_BEHAVIORS:
                for got, want in zip(build.get_steps(name), native.get_steps(name), strict=True):
                    assert np.array_equal(got.agent_id, want.agent_id)
                    assert np.array_equal(got.obs[0], want.obs[0])
                    assert np.array_equal(got.reward, want.reward)
                move = ActionTuple(continuous=rng.uniform(-1, 1, (6, 2)).astype(np.float32))
                build.set_actions(name, move)
                native.set_actions(name, move)
            build.step()
            native.step()
            games += len(build.get_steps(TEAM_BEHAVIORS[0])[1])
        assert games > 6
        assert stats.get_and_reset_stats() == native.stats_channel.get_and_reset_stats()
        network = NetworkConfig(hidden_units=16)
        theta = policy_for(build, network).state_dict()
        plain = PPOConfig(max_steps=192, buffer_size=96, batch_size=32, num_epoch=1)
        with pytest.raises(ValueError, match=r"have team ids but ppo\.self_play is not set"):
            train_request(TrainRequest((), theta, 0, plain, network), build)
        ghost = SelfPlayConfig(save_steps=50, swap_steps=20, team_change=100)
        selfplay = PPOConfig(**{**plain.__dict__, "self_play": ghost})
        result = train_request(TrainRequest((), theta, 0, selfplay, network), build)
        assert result.self_play_state is not None and result.stats["steps"] == 192
    finally:
        build.close()


def test_meta_train_over_builds_with_a_game(
    tiny_config: Callable[..., Config], free_ports: Callable[..., int]
) -> None:
    cfg = tiny_config(
        "ppo=selfplay",
        "experiment=tiny",
        "env=unity",
        "env.num_areas=8",
        "meta.tasks=[{name: FindTarget, weight: 1}, {name: Sumo, weight: 1}]",
        "meta.steps=3",
        f"env.base_port={free_ports(3)}",
    )
    run = train(cfg, "builds")
    with (run / "meta_steps.csv").open() as f:
        table = list(csv.DictReader(f))
    assert {r["task"] for r in table} == {"FindTarget", "Sumo"}
    elo = json.loads((run / "run_logs/training_status.json").read_text())["Brain"]["elo"]
    assert float(table[-1]["elo"]) == elo


def test_a_build_of_teams_without_self_play_is_refused(
    tiny_config: Callable[..., Config], free_ports: Callable[..., int]
) -> None:
    # a lab's build of teams put where a one-behavior task's build goes
    cfg = tiny_config(
        "env=unity",
        "env.num_areas=4",
        "meta.tasks=[{name: FindTarget}]",
        "env.path.FindTarget=envs/builds/Sumo",
        f"env.base_port={free_ports(3)}",
    )
    with pytest.raises(Stopped, match=r"Brain\?team=0, Brain\?team=1 have team ids"):
        train(cfg, "teams")
