"""The `self_play` settings of a behavior's trainer (defined with the other trainer settings)."""

from __future__ import annotations

from meta.algorithm.ppo.config import SelfPlayConfig

__all__ = ["SelfPlayConfig"]
