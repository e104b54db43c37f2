"""Names every side of the project agrees on: the behavior, the splits, the families' builds."""

from __future__ import annotations

from pathlib import Path

BEHAVIOR_NAME = "Brain"
"""The one behavior of every task, as the lab's Unity builds name it."""
SPLITS = ("train", "test")
"""Meta-training ranges of task parameters, and the held-out meta-test ranges."""
FAMILY_NAMES = ("FindTarget", "CarryObject", "Sumo")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUILDS_DIR = PROJECT_ROOT / "envs" / "builds"
DEFAULT_BUILDS = {name: f"envs/builds/{name}" for name in FAMILY_NAMES}
"""Each family's launchable build, relative to the project root."""
