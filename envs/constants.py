"""Names every side of the project agrees on: the behavior, the splits, where the builds live."""

from __future__ import annotations

from pathlib import Path

BEHAVIOR_NAME = "Brain"
"""The one behavior of every task, as the lab's Unity builds name it."""
SPLITS = ("train", "test")
"""Meta-training ranges of task parameters, and the held-out meta-test ranges."""
PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUILDS_DIR = PROJECT_ROOT / "envs" / "builds"
