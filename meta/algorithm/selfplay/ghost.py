"""The ghost's bookkeeping, as ML-Agents' GhostTrainer and GhostController keep it.

Snapshots, opponents, team changes and ELO follow ML-Agents' counters and formulas
(docs/self-play.md, "The ghost trainer"). Everything here goes into the checkpoint, so a
resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from meta.algorithm.ppo.weights import Weights, cpu_copy
from meta.config.ppo import SelfPlayConfig

SelfPlayState = dict[str, Any]
"""A run's self-play state: {"elo": float} and, within a continuous training, "ghost"."""
SUMMARIES = "summaries"
"""Key of a training's ELO summaries in its state: (learning-team step, games, mean rating)."""
LATEST = -1
"""current_opponent when the opponent plays the latest weights (ML-Agents' "current")."""
COUNTERS = ("snapshot_counter", "current_opponent", "learning_team", "step", "ghost_step")
LAST = ("last_save", "last_swap", "last_team_change")


def expected_score(rating: float, opponent: float) -> float:
    """Probability of a win (draws count half) of a player rated `rating` against `opponent`."""
    r1, r2 = 10.0 ** (rating / 400.0), 10.0 ** (opponent / 400.0)
    return r1 / (r1 + r2)


def compute_elo_rating_change(rating: float, opponent: float, result: float) -> float:
    """The change of `rating` after one game of result 1, 0.5 or 0 (GhostController's)."""
    return result - expected_score(rating, opponent)


def result_of(final_reward: float) -> float:
    """A game's result read from its final reward, as ML-Agents reads it: >0 win, <0 loss."""
    return 1.0 if final_reward > 0 else 0.0 if final_reward < 0 else 0.5


@dataclass
class Ghost:
    """Snapshots, the opponent, the learning team, the step counters and the ELO ratings."""

    cfg: SelfPlayConfig
    current_snapshot: Weights
    """The learning policy's latest published weights."""
    generator: torch.Generator
    snapshots: list[Weights] = field(default_factory=list)
    policy_elos: list[float] = field(default_factory=list)
    """One rating per snapshot slot, then the learning policy's own (last)."""
    opponent: Weights = field(default_factory=dict)
    snapshot_counter: int = 0
    current_opponent: int = 0
    learning_team: int = 0
    step: int = 0
    ghost_step: int = 0
    last_save: int = 0
    last_swap: int = 0
    last_team_change: int = 0

    @classmethod
    def start(
        cls, cfg: SelfPlayConfig, weights: Weights, elo: float, seed: int, learning_team: int = 0
    ) -> Ghost:
        """A ghost whose first snapshot (and first opponent) is `weights`, rated `elo`."""
        generator = torch.Generator().manual_seed(seed)
        ghost = cls(cfg, cpu_copy(weights), generator, policy_elos=[float(elo)] * (cfg.window + 1))
        ghost.learning_team = learning_team
        ghost.save_snapshot()
        ghost.opponent = ghost.snapshots[0]
        return ghost

    @property
    def current_elo(self) -> float:
        """The learning policy's rating."""
        return self.policy_elos[-1]

    def publish(self, weights: Weights) -> None:
        """The learning policy changed (after an update): its new weights are the latest."""
        self.current_snapshot = cpu_copy(weights)

    def record_games(self, results: Iterable[float]) -> list[float]:
        """Rate the learning team's finished games (1 win, 0.5 draw, 0 loss) in order.

        Returns the learning policy's rating after each game (what ML-Agents reports).
        """
        elos, after = self.policy_elos, []
        for result in results:
            change = compute_elo_rating_change(elos[-1], elos[self.current_opponent], result)
            elos[self.current_opponent] -= change
            elos[-1] += change
            after.append(elos[-1])
        return after

    def advance(self, learning_steps: int, opponent_steps: int) -> tuple[bool, bool]:
        """Count steps; change team, save, swap when due; whether the team, the opponent changed."""
        self.step += learning_steps
        self.ghost_step += opponent_steps
        team_changed = self.step - self.last_team_change > self.cfg.team_change
        if team_changed:
            self.learning_team = 1 - self.learning_team
            self.last_team_change = self.step
        if self.step - self.last_save > self.cfg.save_steps:
            self.save_snapshot()
            self.last_save = self.step
        swapped = team_changed or self.ghost_step - self.last_swap > self.cfg.swap_steps
        if swapped:
            self.swap_snapshots()
            self.last_swap = self.ghost_step
        return team_changed, swapped

    def save_snapshot(self) -> None:
        """The latest weights into the window's next slot, with the current rating."""
        if self.snapshot_counter < len(self.snapshots):
            self.snapshots[self.snapshot_counter] = self.current_snapshot
        else:
            self.snapshots.append(self.current_snapshot)
        self.policy_elos[self.snapshot_counter] = self.current_elo
        self.snapshot_counter = (self.snapshot_counter + 1) % self.cfg.window

    def swap_snapshots(self) -> None:
        """A new opponent: a past snapshot, or the latest weights with the configured ratio."""
        draw = float(torch.rand((), generator=self.generator))
        if draw < 1.0 - self.cfg.play_against_latest_model_ratio:
            index = int(torch.randint(len(self.snapshots), (), generator=self.generator))
            self.opponent, self.current_opponent = self.snapshots[index], index
        else:
            self.opponent, self.current_opponent = self.current_snapshot, LATEST

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly (tensors and Python numbers only)."""
        state: dict[str, Any] = {name: getattr(self, name) for name in COUNTERS + LAST}
        state.update(
            snapshots=self.snapshots,
            policy_elos=list(self.policy_elos),
            current_snapshot=self.current_snapshot,
            opponent=self.opponent,
            generator=self.generator.get_state(),
        )
        return state

    @classmethod
    def from_state_dict(cls, cfg: SelfPlayConfig, state: dict[str, Any]) -> Ghost:
        """The ghost a state_dict describes (copies: the state is never changed)."""
        generator = torch.Generator()
        generator.set_state(state["generator"].clone())
        snapshots = [cpu_copy(s) for s in state["snapshots"]]
        current = cpu_copy(state["current_snapshot"])
        ghost = cls(cfg, current, generator, snapshots, [float(e) for e in state["policy_elos"]])
        for name in COUNTERS + LAST:
            setattr(ghost, name, int(state[name]))
        ghost.opponent = cpu_copy(state["opponent"])
        return ghost


def elo_only(state: SelfPlayState | None) -> SelfPlayState | None:
    """The part of a self-play state a new training from theta starts with: the run's ELO."""
    return None if state is None else {"elo": float(state["elo"])}


def run_state_after(
    state: SelfPlayState | None,
    results: list[SelfPlayState | None],
    continuous: bool,
    initial_elo: float,
) -> SelfPlayState | None:
    """The run's self-play state after a meta-step's trainings.

    A continuous run (joint, single) keeps its last training's state, ghost included. Reptile
    keeps only the ELO: its games each started from the run's rating, and their changes add
    up (so the trainings stay independent and may run side by side).
    """
    if continuous:
        return without_summaries(results[-1]) if results else state
    games = [r for r in results if r is not None and "ghost" in r]
    if not games:
        return state
    base = initial_elo if state is None else float(state["elo"])
    return {"elo": base + sum(float(r["elo"]) - base for r in games)}


def without_summaries(state: SelfPlayState | None) -> SelfPlayState | None:
    """A training's self-play state without its ELO summaries (written, not carried on)."""
    if state is None:
        return None
    return {k: v for k, v in state.items() if k != SUMMARIES}
