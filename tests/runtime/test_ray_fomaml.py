"""meta=fomaml on Ray actors: the meta-gradient is computed where the training ran, θ bitwise."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from meta.config import Config
from meta.trainer import MetaTrainer, plan_training

Factory = Callable[..., Config]
FOMAML = ("meta=fomaml", "meta.meta_batch_size=2", "meta.steps=2")


def thetas(cfg: Config, run_id: str) -> list[dict[str, torch.Tensor]]:
    """θ after each meta-step."""
    trainer = MetaTrainer(plan_training(cfg, run_id), "{}", {})
    try:
        out = []
        for k in range(cfg.meta.steps):
            trainer.meta_step_once(k)
            out.append({name: value.clone() for name, value in trainer.theta.items()})
        return out
    finally:
        trainer.close()


@pytest.mark.usefixtures("ray_cluster")
def test_fomaml_on_ray_gives_the_local_theta_bitwise(tiny_config: Factory) -> None:
    local = thetas(tiny_config(*FOMAML), "local")
    ray = thetas(tiny_config(*FOMAML, "runtime=ray", "runtime.num_actors=2"), "ray")
    for a, b in zip(local, ray, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(local[0][k], local[1][k]) for k in local[0])
