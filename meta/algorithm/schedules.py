"""Hyperparameter schedules: within an inner training (ML-Agents) and across meta-steps."""

from __future__ import annotations

LEARNING_RATE_FLOOR = 1.0e-10
BETA_FLOOR = 1.0e-5
EPSILON_FLOOR = 0.1


def decayed(schedule: str, initial: float, floor: float, step: int, max_step: int) -> float:
    """ML-Agents' polynomial (power 1) decay from `initial` to `floor` over `max_step` steps."""
    if schedule == "constant":
        return initial
    if schedule != "linear":
        raise ValueError(f"unknown schedule {schedule!r} (use 'constant' or 'linear')")
    fraction = min(step, max_step) / max_step
    return (initial - floor) * (1.0 - fraction) + floor


def annealed(initial: float, meta_step: int, meta_steps: int, floor: float) -> float:
    """Across meta-steps: x_k = x_0 * (1 - k/K), never below `floor`."""
    return max(initial * (1.0 - meta_step / meta_steps), floor)


def interpolated(start: float, end: float, meta_step: int, meta_steps: int) -> float:
    """Linear interpolation from `start` at k=0 towards `end` at k=K (Reptile's frac_done)."""
    frac_done = meta_step / meta_steps
    return frac_done * end + (1.0 - frac_done) * start
