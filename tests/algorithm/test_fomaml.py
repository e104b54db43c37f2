"""First-order MAML: the outer step by hand, the meta-gradient, resume, refusals."""

from __future__ import annotations

import csv
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import envs
from meta.algorithm.fomaml import fomaml_update, meta_gradient
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.registry import validate
from meta.algorithm.request import TrainRequest
from meta.config import Config
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.trainer import MetaTrainer, plan_training, train

Factory = Callable[..., Config]


def test_the_outer_step_follows_the_mean_gradient_and_moves_the_statistics_like_reptile() -> None:
    theta = {"w": torch.tensor([1.0, 2.0]), "normalizer.mean": torch.tensor([0.0])}
    trained = [
        {"w": torch.tensor([9.0, 9.0]), "normalizer.mean": torch.tensor([1.0])},
        {"w": torch.tensor([7.0, 7.0]), "normalizer.mean": torch.tensor([3.0])},
    ]
    gradients = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([3.0, -2.0])}]
    out = fomaml_update(theta, trained, gradients, 0.5)
    # theta - 0.5 * mean(g) = [1, 2] - 0.5 * [2, -1]; trained weights themselves are not used
    assert torch.equal(out["w"], torch.tensor([0.0, 2.5]))
    # statistics: 0 + 0.5 * (2 - 0)
    assert torch.equal(out["normalizer.mean"], torch.tensor([1.0]))
    # a step above 1 moves the statistics at most onto the trained mean
    assert torch.equal(
        fomaml_update(theta, trained, gradients, 2.0)["normalizer.mean"], 2 * 1.0 * torch.ones(1)
    )


def test_meta_gradient_is_ppo_gradient_at_the_weights_clipped_and_seeded() -> None:
    env = envs.make("FindTarget", num_areas=8, seed=1)
    network, ppo = NetworkConfig(hidden_units=16), PPOConfig(buffer_size=64, max_grad_norm=0.5)
    weights = policy_for(env, network, seed=3).state_dict()
    request = TrainRequest((), None, 7, ppo, network)
    grad, steps = meta_gradient(request, env, weights)
    assert steps == 64
    assert set(grad) == {k for k in weights if not k.startswith("normalizer.")}
    norm = torch.sqrt(sum(g.square().sum() for g in grad.values()))
    assert 0.0 < float(norm) <= 0.5 + 1e-5
    again, _ = meta_gradient(request, envs.make("FindTarget", num_areas=8, seed=1), weights)
    assert all(torch.equal(grad[k], again[k]) for k in grad)
    other_seed = dataclasses.replace(request, seed=8)
    other, _ = meta_gradient(other_seed, envs.make("FindTarget", num_areas=8, seed=1), weights)
    assert not all(torch.equal(grad[k], other[k]) for k in grad)


def test_fomaml_runs_spends_the_query_buffer_and_resumes_bitwise(tiny_config: Factory) -> None:
    options = ("meta=fomaml", "meta.meta_batch_size=2", "meta.steps=3")
    straight = train(tiny_config(*options), "straight")
    trainer = MetaTrainer(plan_training(tiny_config(*options), "interrupted"), "{}", {})
    trainer.meta_step_once(0)
    trainer.close()  # as after a crash between meta-steps
    resumed = train(tiny_config(*options, "resume=true"), "interrupted")
    a = torch.load(straight / "Brain.pt", weights_only=True)
    b = torch.load(resumed / "Brain.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    reptile = torch.load(
        train(tiny_config("meta.meta_batch_size=2", "meta.steps=3"), "r") / "Brain.pt",
        weights_only=True,
    )
    assert not all(torch.equal(a[k], reptile[k]) for k in a)
    with (Path(straight) / "meta_steps.csv").open() as f:
        steps = {int(row["inner_steps"]) for row in csv.DictReader(f)}
    cfg = tiny_config()
    assert steps == {cfg.ppo.max_steps + cfg.ppo.buffer_size}  # training + the fresh buffer


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ppo=selfplay"], "meta=fomaml with ppo.self_play"),
        (["meta.tasks=[{name:Sumo}]", "ppo=selfplay"], "meta.tasks[0] (Sumo) is a game of teams"),
        (["meta.outer_lr=0"], "meta.outer_lr must be > 0"),
    ],
)
def test_games_and_settings_fomaml_cannot_honour_are_refused(
    tiny_config: Factory, overrides: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(tiny_config("meta=fomaml", *overrides))
