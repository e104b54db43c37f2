"""The real ML-Agents 1.1.0 ghost trainer on the Sumo build: both teams, ELO, stats, resume.

Needs ML-Agents 1.1.0 in a virtualenv of its own (docs/unity-and-interop.md, "Handing θ to
ML-Agents and Unity", says how). From the project root, with the project's interpreter:

    python experiments/mlagents_selfplay.py --mlagents-venv <dir> [--work <dir>]

1. `mlagents-learn` with a `self_play` section trains `Brain` on envs/builds/Sumo.x86_64
   (`--num-areas`, `--debug` so that ML-Agents logs its team changes and opponent swaps):
   both behaviors, `Brain?team=0` and `Brain?team=1`, connect, and each team learns in turn
   (ML-Agents' first learning team is whichever behavior it registers first).
2. `training_status.json` holds `"Brain": {"elo": ...}`; TensorBoard has `Self-play/ELO` at
   every summary (Sumo's shrinking arena decides its games, so every period rates some) and it
   rises over the run; the build's stats channel's `Environment/Success` is there too.
3. `mlagents-learn --resume`, its config asking for another `initial_elo`, continues from the
   rating the status holds (ML-Agents reads `StatusType.ELO` back), not from the new one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from envs.backend.host import free_ports

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "envs" / "builds" / "Sumo"
RUN_ID = "sumo"
TRAINER_CONFIG = """\
behaviors:
  Brain:
    trainer_type: ppo
    hyperparameters: {{batch_size: 512, buffer_size: 4096, learning_rate: 1.0e-3, beta: 5.0e-3,
                      epsilon: 0.2, lambd: 0.95, num_epoch: 3}}
    network_settings: {{normalize: true, hidden_units: 64, num_layers: 2}}
    reward_signals: {{extrinsic: {{gamma: 0.99, strength: 1.0}}}}
    keep_checkpoints: 5
    checkpoint_interval: 10000
    max_steps: {max_steps}
    time_horizon: 64
    summary_freq: {summary_freq}
    self_play: {{save_steps: 5000, team_change: {team_change}, swap_steps: 2000, window: 10,
                play_against_latest_model_ratio: 0.5, initial_elo: {initial_elo}}}
"""
SUMMARY_FREQ = 2500
TEAM_CHANGE = re.compile(r"Learning team (\d+) swapped on step (\d+)")
SWAP = re.compile(r"Swapping snapshot (\S+) to id (\S+) with team (\d+) learning")


def main() -> None:
    """Parse the command line and run the check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlagents-venv", type=Path, required=True, help="mlagents 1.1.0")
    parser.add_argument("--work", type=Path, default=Path("results") / "mlagents_selfplay")
    parser.add_argument("--steps", type=int, default=100000, help="steps of the first run")
    parser.add_argument("--resume-steps", type=int, default=120000, help="max_steps on resume")
    parser.add_argument("--num-areas", type=int, default=16)
    args = parser.parse_args()
    Check(args).run()


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every TensorBoard scalar ML-Agents wrote for the behavior, as (step, value) pairs."""
    events = EventAccumulator(str(run_dir / "Brain"), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


class Check:
    """The run, its records and the resume, printing what it finds; non-zero exit on failure."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.venv: Path = args.mlagents_venv.resolve()
        self.work: Path = args.work.resolve()
        self.results = self.work / "results"
        self.steps: int = args.steps
        self.resume_steps: int = args.resume_steps
        self.num_areas: int = args.num_areas
        self.failures: list[str] = []

    def run(self) -> None:
        """Train, read the records, resume, then the summary."""
        shutil.rmtree(self.work, ignore_errors=True)
        self.results.mkdir(parents=True)
        team_change = self.steps * 2 // 3
        first = self._config("sumo.yaml", self.steps, team_change, 1200.0)
        log = self.mlagents_learn(first, "train")
        self.both_teams(log)
        elo = self.records()
        again = self._config("sumo_resume.yaml", self.resume_steps, team_change, 1000.0)
        self.resume(self.mlagents_learn(again, "resume", "--resume"), elo)
        print("all checks passed" if not self.failures else f"FAILED: {'; '.join(self.failures)}")
        sys.exit(1 if self.failures else 0)

    def _config(self, name: str, steps: int, team_change: int, initial_elo: float) -> Path:
        path = self.work / name
        path.write_text(
            TRAINER_CONFIG.format(
                max_steps=steps,
                team_change=team_change,
                initial_elo=initial_elo,
                summary_freq=SUMMARY_FREQ,
            )
        )
        return path

    def expect(self, ok: bool, what: str) -> None:
        """Record a failed check."""
        if not ok:
            self.failures.append(what)

    def mlagents_learn(self, config: Path, label: str, *extra: str) -> str:
        """mlagents-learn on the Sumo build with --debug; returns its log."""
        command = [str(self.venv / "bin" / "mlagents-learn"), str(config), f"--env={BUILD}"]
        command += [f"--run-id={RUN_ID}", f"--results-dir={self.results}", "--no-graphics"]
        command += [f"--num-areas={self.num_areas}", f"--base-port={free_ports(3)}", "--debug"]
        done = subprocess.run([*command, *extra], capture_output=True, text=True, cwd=self.work)
        log = done.stdout + done.stderr
        (self.work / f"{label}.log").write_text(log)
        print(f"mlagents-learn {config.name} {' '.join(extra)}: exit {done.returncode}")
        for line in log.splitlines():
            if re.search(r"Connected new brain|Resuming training|Step: \d+\.", line):
                print("   ", line.strip())
        self.expect(done.returncode == 0, f"mlagents-learn {label}: exit {done.returncode}")
        return log

    def both_teams(self, log: str) -> None:
        """Both behaviors connected, the learning team changed, the opponents were swapped."""
        for team in (0, 1):
            self.expect(f"Connected new brain: Brain?team={team}" in log, f"team {team} missing")
        changes = [(int(t), int(s)) for t, s in TEAM_CHANGE.findall(log)]
        swaps = SWAP.findall(log)
        print(f"team changes (team, step): {changes}; opponent swaps: {len(swaps)}")
        print(f"opponents drawn: {sorted({s[0] for s in swaps})}")
        # ML-Agents' first learning team is the first behavior it registers (from a set: either).
        self.expect(bool(changes), "the learning team never changed")
        learners = {int(s[2]) for s in swaps}
        self.expect(learners == {0, 1}, f"opponents swapped only with team(s) {learners} learning")

    def status_elo(self) -> Any:
        """The rating in training_status.json under the behavior (None when absent)."""
        path = self.results / RUN_ID / "run_logs" / "training_status.json"
        return json.loads(path.read_text()).get("Brain", {}).get("elo")

    def records(self) -> float:
        """The status's ELO, TensorBoard's Self-play/ELO and the stats channel's success."""
        elo = self.status_elo()
        tags = scalars(self.results / RUN_ID)
        curve = tags.get("Self-play/ELO", [])
        success = tags.get("Environment/Success", [])
        print(f"training_status.json Brain.elo: {elo}")
        print(f"TensorBoard Self-play/ELO: {[(s, round(v, 2)) for s, v in curve]}")
        self.elo_curve(curve)
        print(f"TensorBoard Environment/Success (stats channel): {len(success)} points")
        self.expect(isinstance(elo, float), "training_status.json has no Brain.elo")
        self.expect(bool(curve), "TensorBoard has no Self-play/ELO")
        self.expect(bool(success), "the stats channel's Environment/Success is missing")
        return float(elo) if isinstance(elo, float) else float("nan")

    def elo_curve(self, curve: list[tuple[int, float]]) -> None:
        """An ELO point at every summary, and a rating that rose over the run."""
        summaries = self.steps // SUMMARY_FREQ
        print(f"ELO points: {len(curve)} of {summaries} summaries")
        self.expect(len(curve) >= summaries, "a summary without a Self-play/ELO point")
        if curve:
            halves = [v for s, v in curve if s <= self.steps // 2], [v for s, v in curve]
            rise = curve[-1][1] - curve[0][1]
            print(f"ELO rise from the first summary to the last: {rise:.1f}")
            self.expect(rise > 0 and max(halves[0]) < curve[-1][1], "the rating did not rise")

    def resume(self, log: str, elo: float) -> None:
        """The resumed run rates from the stored ELO, not from its config's initial_elo 1000."""
        after = self.status_elo()
        resumed = [(s, v) for s, v in scalars(self.results / RUN_ID).get("Self-play/ELO", [])]
        curve = [v for s, v in resumed if s > self.steps]  # the summaries after the resume
        print(f"after --resume: Brain.elo {after} (stored before: {elo:.3f}, config asks 1000)")
        self.expect("Resuming training from step" in log, "mlagents-learn did not resume")
        self.expect(isinstance(after, float) and abs(after - elo) < 100.0, "ELO not restored")
        print(f"Self-play/ELO after the resume: {[round(v, 1) for v in curve]}")
        self.expect(bool(curve), "no Self-play/ELO point after the resume")
        self.expect(all(abs(v - elo) < 100.0 for v in curve), "a Self-play/ELO point near 1000")


if __name__ == "__main__":
    main()
