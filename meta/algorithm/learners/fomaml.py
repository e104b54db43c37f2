"""First-order MAML beside Reptile: the same trainings, θ steps along the meta-gradient."""

from __future__ import annotations

from meta.algorithm.fomaml import fomaml_update
from meta.algorithm.learners.reptile import Reptile
from meta.algorithm.reptile import Weights
from meta.algorithm.request import TrainResult


class FOMAML(Reptile):
    """Each training also measures PPO's gradient at φ_i; θ <- θ − ε·mean_i g_i."""

    name = "fomaml"

    meta_gradient = True

    def update(self, theta: Weights, results: list[TrainResult], outer_lr: float) -> Weights:
        """Step θ along the mean meta-gradient (the normaliser moves as Reptile moves it)."""
        gradients = [r.meta_gradient for r in results if r.meta_gradient is not None]
        return fomaml_update(theta, [r.weights for r in results], gradients, outer_lr)
