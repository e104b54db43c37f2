"""Fine-tuning resets: each re-initialises exactly the parameters it names, from the seed."""

from __future__ import annotations

import pytest
import torch

import envs
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.weights import Weights, cpu_weights
from meta.algorithm.request import Task, TrainRequest
from meta.algorithm.resets import reset_keys
from meta.algorithm.training import train
from meta.config.ppo import NetworkConfig, PPOConfig

NETWORK = NetworkConfig(hidden_units=8, num_layers=2)
EXPECTED = {
    "value_head": {"critic.4.weight", "critic.4.bias"},
    "critic": {f"critic.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")},
    "policy_head": {"actor.4.weight", "actor.4.bias", "log_std"},
    "normalizer": {"normalizer.mean", "normalizer.var", "normalizer.count"},
}


def trained_start() -> Weights:
    """A start unlike a fresh policy everywhere: every parameter and statistic moved."""
    weights = cpu_weights(policy_for(envs.make("FindTarget", num_areas=2), NETWORK, seed=7))
    return {k: v + 0.5 for k, v in weights.items()}


def started(weights: Weights | None, reset: tuple[str, ...], seed: int = 3) -> Weights:
    """The start a request trains from (0 updates: the start itself comes back)."""
    request = TrainRequest(
        tasks=(Task("FindTarget", {}),),
        weights=weights,
        seed=seed,
        ppo=PPOConfig(),
        network=NETWORK,
        updates=0,
        reset=reset,
    )
    return train(request, envs.make("FindTarget", num_areas=2, seed=0)).weights


def changed(a: Weights, b: Weights) -> set[str]:
    return {k for k in a if not torch.equal(a[k], b[k])}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_reset_changes_exactly_the_parameters_it_names(name: str) -> None:
    start = trained_start()
    reset = started(start, (name,))
    assert changed(start, reset) == EXPECTED[name]
    fresh = cpu_weights(policy_for(envs.make("FindTarget", num_areas=2), NETWORK, seed=3))
    for key in EXPECTED[name]:  # the reset parts are the fresh policy's of the request's seed
        assert torch.equal(reset[key], fresh[key]), key
    other = changed(reset, started(start, (name,), seed=4))
    assert other == {k for k in EXPECTED[name] if k.endswith(".weight")}  # biases start at 0
    assert not changed(reset, started(start, (name,)))  # deterministic


def test_resets_combine_and_no_reset_keeps_the_start() -> None:
    start = trained_start()
    assert not changed(start, started(start, ()))
    both = started(start, ("value_head", "normalizer"))
    assert changed(start, both) == EXPECTED["value_head"] | EXPECTED["normalizer"]


def test_a_scratch_start_is_the_same_fresh_policy_with_or_without_resets() -> None:
    plain = started(None, ())
    assert not changed(plain, started(None, ("value_head", "policy_head", "normalizer")))


def test_an_unknown_reset_is_named() -> None:
    with pytest.raises(ValueError, match="unknown reset 'value_net'"):
        reset_keys(["value_net.4.weight"], ["value_net"])
