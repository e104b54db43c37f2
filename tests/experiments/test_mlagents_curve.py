"""The comparison's reading of our curve: each point the mean over the 10,240 steps before it."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from scripts import experiment

REWARD, SUCCESS = "Environment/Cumulative Reward", "Environment/Success"


def _script():
    return experiment("mlagents_ppo")


def _updates(path: Path, rows: list[tuple[float, float, float]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["meta_step", "update", "steps", REWARD, SUCCESS])
        for k, (steps, reward, success) in enumerate(rows, start=1):
            writer.writerow([0, k, steps, reward, success])
    return path


def test_buffers_of_whole_steps_are_the_points_themselves(tmp_path: Path) -> None:
    script = _script()
    rows = [(10240.0 * k, -1.0 + 0.1 * k, 0.05 * k) for k in range(1, 4)]
    curve = script._from_updates(_updates(tmp_path / "u.csv", rows), [10240, 20480, 30720])
    assert curve == {
        10240: pytest.approx((-0.9, 0.05)),
        20480: pytest.approx((-0.8, 0.1)),
        30720: pytest.approx((-0.7, 0.15)),
    }


def test_a_buffer_over_the_size_shares_its_steps_between_two_points(tmp_path: Path) -> None:
    script = _script()
    # buffers end at 10,624 and 21,248: the second point takes 384 steps of the first buffer
    rows = [(10624.0, -1.0, 0.0), (21248.0, 0.0, math.nan)]
    curve = script._from_updates(_updates(tmp_path / "u.csv", rows), [10240, 20480])
    assert curve[10240] == pytest.approx((-1.0, 0.0))
    assert curve[20480][0] == pytest.approx(-384 / 10240)
    assert curve[20480][1] == pytest.approx(0.0)  # a buffer without success reported is left out


def test_updates_that_end_before_the_last_point_are_refused(tmp_path: Path) -> None:
    script = _script()
    with pytest.raises(SystemExit, match="end before step 20480"):
        script._from_updates(_updates(tmp_path / "u.csv", [(10240.0, -1.0, 0.0)]), [10240, 20480])


def test_reusing_curves_from_a_comparison_that_is_not_there_is_refused(tmp_path: Path) -> None:
    script = _script()
    with pytest.raises(SystemExit, match=r"--reuse: .*curves\.csv does not exist"):
        script.reused([tmp_path / "curves.csv"], ["mlagents-learn"], ["FindTarget"])
    assert script.reused([tmp_path / "curves.csv"], [], ["FindTarget"]) == {}


def _curves(path: Path, rows: list[tuple[str, int, float]]) -> Path:
    """A comparison's curves.csv: (trainer, seed, reward) at one point of FindTarget."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "trainer", "seed", "steps", "label", "reward", "success"])
        for trainer, seed, reward in rows:
            writer.writerow(["FindTarget", trainer, seed, 10240, 10000, reward, "nan"])
    return path


def test_reused_curves_are_every_seed_of_every_file_and_a_run_in_two_must_agree(
    tmp_path: Path,
) -> None:
    script = _script()
    first = _curves(tmp_path / "a.csv", [("mlagents-learn", 1, -1.0), ("default", 1, 0.5)])
    second = _curves(tmp_path / "b.csv", [("mlagents-learn", 1, -1.0), ("mlagents-learn", 6, -0.9)])
    curves = script.reused([first, second], ["mlagents-learn"], ["FindTarget"])
    assert sorted(run.seed for run in curves) == [1, 6]
    assert all(run.trainer == "mlagents-learn" for run in curves)
    other = _curves(tmp_path / "c.csv", [("mlagents-learn", 1, -0.5)])
    with pytest.raises(SystemExit, match="FindTarget-mlagents_learn-1 differs"):
        script.reused([first, other], ["mlagents-learn"], ["FindTarget"])
    with pytest.raises(SystemExit, match="no ppo=mlagents curve of FindTarget"):
        script.reused([first], ["ppo=mlagents"], ["FindTarget"])


def test_welch_check_names_the_largest_difference_and_the_weakest_point(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = _script()
    steps = [10240 * k for k in (2, 3, 4)]  # 20k is before the band's first point, 30k
    theirs = [
        {s: (-1.0 + 0.1 * k + 0.01 * seed, 0.0) for k, s in enumerate(steps)} for seed in range(3)
    ]
    ours = [
        {s: (v + (0.5 if s == steps[1] else 0.0), 0.0) for s, (v, _) in c.items()} for c in theirs
    ]
    far = [{s: (v + 5.0, 0.0) for s, (v, _) in c.items()} for c in theirs]  # only 20k: left out
    far = [
        {**c, steps[1]: theirs[i][steps[1]], steps[2]: theirs[i][steps[2]]}
        for i, c in enumerate(far)
    ]
    groups = {("T", "mlagents-learn"): theirs, ("T", "ours"): ours, ("T", "far"): far}
    script.welch_check("T", groups)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("T ours (3 seeds) against mlagents-learn (3): largest difference")
    assert "+0.500 at 30k; smallest Welch p 0.00 at 30k" in lines[0]
    assert lines[1].endswith(
        "largest difference of means +0.000 at 30k; smallest Welch p 1.00 at 30k"
    )


def test_band_odds_calibrate_the_band_check_on_the_reference_against_itself(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = _script()
    steps = [10240 * k for k in (3, 4)]
    # ten reference seeds alike: the mean of any five is the band of the other five
    theirs = [{s: (-0.5, 0.0) for s in steps} for _ in range(10)]
    far = [{s: (5.0, 0.0) for s in steps} for _ in range(5)]
    script.band_odds("T", {("T", "mlagents-learn"): theirs, ("T", "far"): far})
    (line,) = capsys.readouterr().out.splitlines()
    assert line == (
        "T band check of 5 seeds each: passes for mlagents-learn against itself in 100% of the "
        "252 splits of its 10 seeds; for far against it in 0% of the 252 choices of 5 seeds of each"
    )
    script.band_odds("T", {("T", "mlagents-learn"): theirs[:9], ("T", "far"): far})
    assert capsys.readouterr().out == ""  # fewer than ten reference seeds: no halves to compare
