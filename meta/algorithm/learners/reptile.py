"""Reptile (Nichol et al. 2018): θ moves towards the mean of the trained weights."""

from __future__ import annotations

from meta.algorithm.learner import MetaLearner
from meta.algorithm.reptile import Weights, reptile_update
from meta.algorithm.request import TrainResult


class Reptile(MetaLearner):
    """θ <- θ + ε·(mean_i φ_i − θ), each φ_i an inner training from θ."""

    name = "reptile"

    def update(self, theta: Weights, results: list[TrainResult], outer_lr: float) -> Weights:
        """Interpolate θ towards the trained weights."""
        return reptile_update(theta, [r.weights for r in results], outer_lr)
