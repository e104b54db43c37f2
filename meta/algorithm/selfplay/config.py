"""The `self_play` settings of a behavior's trainer, with ML-Agents' names and defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SelfPlayConfig:
    """ML-Agents' `self_play` section: snapshots, opponent swaps, team changes, ELO."""

    save_steps: int = 20000
    """Learning-team agent-steps between snapshots of the learning policy."""
    team_change: int = 100000
    """Learning-team agent-steps before the other team becomes the learning team."""
    swap_steps: int = 2000
    """Opponent agent-steps between draws of a new opponent."""
    window: int = 10
    """Past snapshots an opponent is drawn from."""
    play_against_latest_model_ratio: float = 0.5
    """Probability that the opponent is the latest policy rather than a past snapshot."""
    initial_elo: float = 1200.0
    """ELO rating of the policy at the start of the run."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid setting."""
        for name in ("save_steps", "team_change", "swap_steps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ppo.self_play.{name} must be > 0, got {getattr(self, name)}")
        if self.window < 1:
            raise ValueError(f"ppo.self_play.window must be >= 1, got {self.window}")
        ratio = self.play_against_latest_model_ratio
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(
                f"ppo.self_play.play_against_latest_model_ratio must be in [0, 1], got {ratio}"
            )
        if not -1e6 < self.initial_elo < 1e6:
            raise ValueError(f"ppo.self_play.initial_elo must be finite, got {self.initial_elo}")
