"""meta-bench's parts: FLOP model and limits by hand and by torch's counter, report arithmetic,
the SB3 VecEnv contract, schedules, and what each training reports against what it did."""

from __future__ import annotations

import tempfile
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import envs
from envs.tasks.core import BatchedTask
from meta.algorithm.ppo.hyper import LEARNING_RATE_FLOOR, decayed
from meta.algorithm.ppo.network import policy_for
from meta.bench import limit as bench_limit
from meta.bench import sb3 as bench_sb3
from meta.bench.gym_vec import TaskVecEnv
from meta.bench.limit import flop_model, layers, limit_rate, limits
from meta.bench.markup import BEGIN, END, splice
from meta.bench.report import outer_breakdown, summarise
from meta.bench.sb3 import Outcome, Settings, _Schedule, train_ours, train_sb3
from meta.config.ppo import NetworkConfig, PPOConfig
from tests.algorithm.stacking import stack_of

# --- FLOP model and the GEMM limit -------------------------------------------------------------


def test_flop_model_hand_values() -> None:
    model = flop_model(10, 2, NetworkConfig(hidden_units=128, num_layers=2), PPOConfig())
    actor = 2 * (10 * 128 + 128 * 128 + 128 * 2)
    critic = 2 * (10 * 128 + 128 * 128 + 128 * 1)
    assert model.collect == actor + critic == 71_424
    assert model.first_layers == 2 * 2 * 10 * 128
    assert model.update == 3 * (3 * 71_424 - 5_120) == 627_456
    assert model.total == 698_880


def test_flop_model_is_what_torch_counts_in_the_policy_and_in_the_timed_gemms() -> None:
    network, batch = NetworkConfig(hidden_units=16, num_layers=2), 32
    model = flop_model(10, 2, network, PPOConfig())
    policy = stack_of(policy_for(envs.make("FindTarget"), network))
    obs = torch.randn(1, batch, 10)
    with FlopCounterMode(display=False) as collect:
        policy.act(obs, [torch.Generator()])
    with FlopCounterMode(display=False) as update:  # one epoch: forward and backward
        x = policy.features(obs)
        (policy.mean_from(x).sum() + policy.value_from(x).sum()).backward()
    assert collect.get_total_flops() == batch * model.collect
    assert update.get_total_flops() == batch * model.update // model.num_epoch
    # gemm_seconds times exactly those products: 6 calls each (a warm-up round and 5 rounds).
    nets = layers(10, 2, network)
    for backward, per_call in ((False, collect), (True, update)):
        with FlopCounterMode(display=False) as timed:
            bench_limit.gemm_seconds(nets, batch, backward=backward, repeats=1)
        assert timed.get_total_flops() == 6 * per_call.get_total_flops()


def test_limits_and_shares_of_the_limit_follow_the_measured_gemm_times() -> None:
    # obs 3, 1 hidden layer of 4, 2 actions: actor (3,4),(4,2), critic (3,4),(4,1).
    network, ppo = NetworkConfig(hidden_units=4, num_layers=1), PPOConfig(batch_size=8)
    forward, first = 2 * (12 + 8) + 2 * (12 + 4), 2 * 12 + 2 * 12  # 72, 48
    update = 3 * (3 * forward - first)  # 504 = 3 epochs x 168
    limit = limits(3, 2, network, ppo, num_areas=2, threads=(1, 2), repeats=16)
    assert limit["flop"]["collect"] == forward and limit["flop"]["update"] == update
    one, two = limit["threads"]["1"], limit["threads"]["2"]
    for figures in (one, two):  # GFLOP/s x seconds an agent-step = FLOP an agent-step
        assert 0 < figures["collect_s_per_step"] < 0.01 and 0 < figures["update_s_per_step"] < 0.01
        assert figures["gflops_collect_batch"] * figures["collect_s_per_step"] * 1e9 == (
            pytest.approx(forward)
        )
        assert figures["gflops_update_batch"] * figures["update_s_per_step"] * 1e9 == (
            pytest.approx(update)
        )
    collect, alone = one["collect_s_per_step"], one["update_s_per_step"]
    assert limit_rate(limit, 1, 1) == pytest.approx(1 / (collect + alone))
    # 2 update threads: the faster of torch's 2 threads and two 1-thread halves side by side
    both = min(two["update_s_per_step"], alone / 2)
    assert limit_rate(limit, 1, 2) == pytest.approx(1 / (collect + both))
    report: dict[str, Any] = {
        "settings": {"num_areas": 2, "serial_batch": 256},  # serial: collection on 1 thread
        "limit": limit,
        "training": [
            {"threads": 1, "ours": {"rate": 100.0}, "sb3": {"rate": 80.0}},
            {"threads": 2, "ours": {"rate": 200.0}, "sb3": {"rate": 50.0}},
        ],
    }
    summarise(report)
    achieved = report["limit"]["achieved"]
    assert achieved["1"]["fraction"] == pytest.approx(100 / limit_rate(limit, 1, 1))
    assert achieved["2"]["fraction"] == pytest.approx(200 / limit_rate(limit, 1, 2))
    assert achieved["2"]["gflops"] == pytest.approx(200 * (72 + 504) / 1e9)
    best = report["best"]
    assert (best["ours"]["threads"], best["sb3"]["threads"], best["ratio"]) == (2, 1, 2.5)


def test_outer_breakdown_hand_values() -> None:
    timers = {
        "children": {
            "meta_step": {
                "count": 4,
                "total": 10.0,
                "children": {
                    "inner_training": {"total": 8.0},
                    "commit": {"total": 1.2, "children": {"checkpoint": {"total": 0.8}}},
                    "interpolate": {"total": 0.4},
                },
            }
        }
    }
    outer = outer_breakdown(timers)
    assert outer["meta_steps"] == 4
    assert outer["overhead_s"] == pytest.approx(0.5) and outer["inner_training_s"] == 2.0
    assert outer["parts_s"] == {
        "commit": pytest.approx(0.3),
        "commit: checkpoint": pytest.approx(0.2),
        "interpolate": pytest.approx(0.1),
        "other (env creation, rows)": pytest.approx(0.1),
    }


def test_readme_section_is_spliced_between_the_markers() -> None:
    text = f"# Title\n\n{BEGIN}\nold table\n{END}\n\nmore\n"
    assert splice(text, "## Performance\n\nnew") == (
        f"# Title\n\n{BEGIN}\n## Performance\n\nnew\n{END}\n\nmore\n"
    )
    with pytest.raises(ValueError, match="meta-bench:begin"):
        splice("# no markers\n", "x")


# --- the SB3 side ------------------------------------------------------------------------------


def test_vec_env_bootstraps_timeouts_through_infos() -> None:
    venv = TaskVecEnv("FindTarget", num_areas=4, seed=0, max_step=3)
    assert venv.reset().shape == (4, 10) and venv.num_envs == 4
    for _ in range(3):
        venv.step_async(np.zeros((4, 2), np.float32))
        obs, rewards, dones, infos = venv.step_wait()
    assert isinstance(obs, np.ndarray)  # SB3's VecEnv allows dict and tuple observations too
    assert dones.all()
    for i in range(4):
        assert infos[i]["TimeLimit.truncated"] is True
        assert infos[i]["terminal_observation"][9] == 0.0  # no episode time left
    assert np.all(obs[:, 9] == 1.0)  # already reset, as SB3 expects
    assert rewards.dtype == np.float32
    venv.close()


def test_vec_env_reports_successes_as_terminal_not_truncated() -> None:
    venv = TaskVecEnv("FindTarget", num_areas=2, seed=0)
    venv.reset()
    venv.core.pos[:, 0] = venv.core.objective[:, 0]  # area 0 on its target (as test_ppo does)
    venv.step_async(np.zeros((2, 2), np.float32))
    _, rewards, dones, infos = venv.step_wait()
    assert dones[0] and not dones[1]
    assert infos[0]["TimeLimit.truncated"] is False and infos[0]["is_success"] is True
    assert rewards[0] > 0.9 and infos[1] == {}
    venv.close()


def test_sb3_schedule_gives_the_value_ours_uses_at_every_update() -> None:
    budget, buffer = 40_960, 10_240
    schedule = _Schedule(3e-4, LEARNING_RATE_FLOOR, budget, buffer)
    for k in range(4):
        progress_remaining = 1.0 - (k + 1) * buffer / budget  # SB3 reads it after collecting
        expected = decayed("linear", 3e-4, LEARNING_RATE_FLOOR, k * buffer, budget)
        assert schedule(progress_remaining) == pytest.approx(expected, rel=1e-12)


# --- what a training reports against what it did ----------------------------------------------

TICK = 2.0**-10  # fake seconds per task step: exact in binary, so sums of ticks are exact


def _small(budget: int, eval_episodes: int) -> Settings:
    """A training of a few 1,024-step buffers over 16 areas, 16 hidden units."""
    return Settings(
        num_areas=16,
        budget=budget,
        eval_episodes=eval_episodes,
        ppo=replace(PPOConfig(), buffer_size=1_024, batch_size=256),
        network=NetworkConfig(hidden_units=16),
    )


@pytest.mark.parametrize("training", [train_ours, train_sb3], ids=["ours", "sb3"])
def test_a_training_reports_the_steps_it_took_and_times_only_them(
    training: Callable[[Settings], Outcome], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every task step (both sides step the same batched core) advances a fake clock by TICK,
    # so the timed seconds say which steps fell inside the timed window.
    settings = _small(budget=2_500, eval_episodes=32)
    clock = types.SimpleNamespace(now=0.0)
    steps: dict[int, int] = {}  # areas of the env -> task steps taken
    original = BatchedTask.step

    def step(core: BatchedTask[Any], action: np.ndarray) -> Any:
        clock.now += TICK
        steps[core.num_areas] = steps.get(core.num_areas, 0) + 1
        return original(core, action)

    monkeypatch.setattr(BatchedTask, "step", step)
    now = lambda: clock.now  # noqa: E731
    monkeypatch.setattr(
        bench_sb3, "time", types.SimpleNamespace(perf_counter=now, process_time=now)
    )
    outcome = training(settings)
    trained = steps[settings.num_areas] * settings.num_areas
    assert outcome.agent_steps == trained == 3 * 1_024  # whole buffers, the first >= budget
    assert outcome.seconds == outcome.cpu_seconds == steps[settings.num_areas] * TICK
    assert outcome.rate == settings.num_areas / TICK  # steps over time, evaluation excluded
    assert steps[settings.eval_episodes] > 0  # the evaluation ran, after the clock stopped


def test_sb3_training_writes_no_log_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SB3's learn() makes <temp>/SB3-<date> for its logger unless it is given one.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    train_sb3(_small(budget=1_024, eval_episodes=16))
    assert list(tmp_path.iterdir()) == []
