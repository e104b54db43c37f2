"""Scalar names, defined once: ML-Agents' own tags where one exists, then ours.

The inner trainings' statistics, the CSV tables, the console and TensorBoard all key their
values by these names; the ones a build reports through its stats channel come from `envs`.
"""

from __future__ import annotations

from envs.tasks.episode_stats import EPISODE_LENGTH, SUCCESS

__all__ = [
    "APPROX_KL",
    "BETA",
    "CLIP_FRACTION",
    "CUMULATIVE_REWARD",
    "ELO",
    "ENTROPY",
    "EPISODE_LENGTH",
    "EPSILON",
    "EXPLAINED_VARIANCE",
    "LEARNING_RATE",
    "LESSON",
    "OUTER_LR",
    "POLICY_LOSS",
    "SUCCESS",
    "SUCCESS_RATE",
    "VALUE_LOSS",
    "WEIGHT_DELTA_NORM",
    "WIN_RATE",
]

CUMULATIVE_REWARD = "Environment/Cumulative Reward"
LESSON = "Environment/Lesson"
POLICY_LOSS = "Losses/Policy Loss"
VALUE_LOSS = "Losses/Value Loss"
LEARNING_RATE = "Policy/Learning Rate"
BETA = "Policy/Beta"
EPSILON = "Policy/Epsilon"
ENTROPY = "Policy/Entropy"
ELO = "Self-play/ELO"
"""ML-Agents' name of the learning policy's rating."""
APPROX_KL = "Policy/Approx KL"
CLIP_FRACTION = "Policy/Clip Fraction"
EXPLAINED_VARIANCE = "Policy/Explained Variance"
WIN_RATE = "Self-play/Win Rate"
"""Fraction of the learning team's finished games that it won."""
SUCCESS_RATE = "Meta/Success Rate"
OUTER_LR = "Meta/Outer Learning Rate"
WEIGHT_DELTA_NORM = "Meta/Weight Delta Norm"
