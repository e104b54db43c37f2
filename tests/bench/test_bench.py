"""meta-bench: FLOP model by hand, the SB3 VecEnv contract, schedules, and `--quick` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from meta.algorithm.schedules import LEARNING_RATE_FLOOR, decayed
from meta.bench import cli as bench
from meta.bench.gym_vec import TaskVecEnv
from meta.bench.limit import flop_model
from meta.bench.sb3 import _Schedule
from meta.config import NetworkConfig, PPOConfig


def test_flop_model_hand_values() -> None:
    model = flop_model(10, 2, NetworkConfig(hidden_units=128, num_layers=2), PPOConfig())
    actor = 2 * (10 * 128 + 128 * 128 + 128 * 2)
    critic = 2 * (10 * 128 + 128 * 128 + 128 * 1)
    assert model.collect == actor + critic == 71_424
    assert model.first_layers == 2 * 2 * 10 * 128
    assert model.update == 3 * (3 * 71_424 - 5_120) == 627_456
    assert model.total == 698_880


def test_vec_env_bootstraps_timeouts_through_infos() -> None:
    venv = TaskVecEnv("FindTarget", num_areas=4, seed=0, max_step=3)
    obs = venv.reset()
    assert obs.shape == (4, 10) and venv.num_envs == 4
    for _ in range(3):
        venv.step_async(np.zeros((4, 2), np.float32))
        obs, rewards, dones, infos = venv.step_wait()
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


def test_quick_bench_writes_json_markdown_and_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, md = tmp_path / "bench.json", tmp_path / "performance.md"
    bench.main(["--quick", "--out", str(out), "--markdown", str(md)])
    report = json.loads(out.read_text())
    assert report["settings"]["budget"] == 100_000 and report["settings"]["n_steps"] == 160
    for row in report["training"]:
        for side in ("ours", "sb3"):
            assert row[side]["agent_steps"] >= 100_000 and row[side]["rate"] > 0
            assert 0.0 <= row[side]["success"] <= 1.0
        assert row["ratio"] == pytest.approx(row["ours"]["rate"] / row["sb3"]["rate"])
    assert report["best"]["ratio"] > 0
    assert report["limit"]["flop"]["total"] == 698_880
    assert set(report["limit"]["achieved"]) == {"1"}  # --quick compares at one thread
    assert {e["areas"] for e in report["env"]} == {1, 64, 1024}
    assert report["unity"]["available"] in (True, False)
    assert report["outer"]["overhead_s"] > 0
    text = md.read_text()
    assert text.startswith("## Performance") and "meta-bench --quick" in text
    assert "| threads | ours steps/s | SB3 steps/s |" in text
    printed = capsys.readouterr().out
    assert "Inner PPO vs Stable-Baselines3" in printed and "meta-bench: wrote" in printed


def test_readme_section_is_spliced_between_the_markers() -> None:
    from meta.bench.report import BEGIN, END, splice

    text = f"# Title\n\n{BEGIN}\nold table\n{END}\n\nmore\n"
    assert splice(text, "## Performance\n\nnew") == (
        f"# Title\n\n{BEGIN}\n## Performance\n\nnew\n{END}\n\nmore\n"
    )
    with pytest.raises(ValueError, match="meta-bench:begin"):
        splice("# no markers\n", "x")
