"""The key mapping against a record of a real ML-Agents 1.1.0 checkpoint, both ways.

`tests/data/mlagents_1.1.0/checkpoints.json` lists the modules, key names, shapes and dtypes
that `mlagents-learn` 1.1.0 wrote for two networks (see the README there).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from interopkit import (
    IDS,
    RUNS,
    mean_action,
    mlagents_act,
    observations,
    our_act,
    synthetic_checkpoint,
    trained_policy,
)

from meta.config.ppo import NetworkConfig
from meta.interop.mlagents import (
    CRITIC,
    OPTIMIZER,
    POLICY,
    InteropError,
    Network,
    from_mlagents,
    is_mlagents,
    settings_misfit,
    to_mlagents,
)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_outward_keys_shapes_and_constants_are_mlagents(run: dict[str, Any]) -> None:
    network = run["network"]
    theta = trained_policy(network).state_dict()
    modules = to_mlagents(theta, network["normalize"], 4096)
    assert list(modules) == list(run["modules"])
    for name, keys in run["modules"].items():
        if name == OPTIMIZER:
            group = modules[name]["param_groups"][0]
            assert len(group["params"]) == keys["params"] and modules[name]["state"] == {}
            assert set(keys["param_group_keys"]) <= set(group)
            continue
        ours = [
            [k, list(v.shape), str(v.dtype).removeprefix("torch.")]
            for k, v in modules[name].items()
        ]
        assert ours == keys, name
    for key, value in run["constants"].items():
        assert modules[POLICY][key].tolist() == value
    assert modules["global_step"]["_GlobalSteps__global_step"].tolist() == [4096]


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_outward_mlagents_acts_as_our_policy(run: dict[str, Any]) -> None:
    network = run["network"]
    policy = trained_policy(network)
    modules = to_mlagents(policy.state_dict(), network["normalize"], 1)
    obs = observations(network["obs_size"])
    with torch.no_grad():
        ours = mean_action(policy, obs).clamp(-1, 1)
    theirs = mlagents_act(modules[POLICY], obs)
    assert (ours - theirs).abs().max() < 1e-5
    assert (ours.abs() == 1).any() and (ours.abs() < 1).any()  # clipped and unclipped alike
    sigma = torch.exp(modules[POLICY]["action_model._continuous_distribution.log_sigma"]) / 3
    assert torch.allclose(sigma.flatten(), policy.log_std.exp(), rtol=1e-6)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_inward_a_recorded_checkpoint_loads_and_acts_alike(run: dict[str, Any]) -> None:
    checkpoint = synthetic_checkpoint(run)
    assert is_mlagents(checkpoint)
    theta, network = from_mlagents(checkpoint, "ml/Brain/checkpoint.pt")
    assert network == Network(**run["network"])
    fresh = trained_policy(run["network"]).state_dict()
    assert list(theta) == list(fresh)
    assert all(theta[k].shape == fresh[k].shape and theta[k].dtype == fresh[k].dtype for k in fresh)
    obs = observations(network.obs_size)
    gap = (our_act(theta, network, obs) - mlagents_act(checkpoint[POLICY], obs)).abs().max()
    assert gap < 1e-5


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_round_trip_keeps_the_weights(run: dict[str, Any]) -> None:
    network = run["network"]
    theta = trained_policy(network).state_dict()
    back, found = from_mlagents(to_mlagents(theta, network["normalize"], 7), "x")
    assert found == Network(**network)
    keys = [k for k in theta if network["normalize"] or not k.startswith("normalizer.")]
    for key in keys:
        assert torch.allclose(back[key], theta[key], rtol=1e-6, atol=1e-7), key


def test_normaliser_count_becomes_whole_steps() -> None:
    theta = trained_policy(RUNS[0]["network"]).state_dict()
    theta["normalizer.count"] = torch.tensor(700.4)
    policy = to_mlagents(theta, True, 1)[POLICY]
    steps = policy["network_body.processors.0.normalizer.normalization_steps"]
    assert steps.dtype == torch.int64 and int(steps) == 700
    theta["normalizer.count"] = torch.tensor(0.0)  # never updated: ML-Agents' own start, 1
    assert (
        int(
            to_mlagents(theta, True, 1)[POLICY][
                "network_body.processors.0.normalizer.normalization_steps"
            ]
        )
        == 1
    )


def _broken(change: str) -> dict[str, Any]:
    checkpoint = synthetic_checkpoint(RUNS[0])
    policy = checkpoint[POLICY]
    if change == "discrete":
        policy["discrete_act_size_vector"] = torch.tensor([[3.0, 2.0]])
    elif change == "memory":
        policy["memory_size_vector"] = torch.tensor([128.0])
    elif change == "sac":
        del checkpoint[CRITIC]
    elif change == "visual":
        policy["network_body.observation_encoder.processors.1.conv_layers.0.weight"] = torch.zeros(
            1
        )
    elif change == "shapes":
        policy["network_body._body_endoder.seq_layers.2.weight"] = torch.zeros(64, 128)
    return checkpoint


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("discrete", "discrete action branches [3, 2]"),
        ("memory", "recurrent network (memory_size 128)"),
        ("sac", "no 'Optimizer:critic' module"),
        ("visual", "unexpected network_body.observation_encoder.processors.1"),
        ("shapes", "actor.2.weight maps to shape (64, 128), expected (128, 128)"),
    ],
)
def test_another_network_is_one_line_naming_it(change: str, message: str) -> None:
    with pytest.raises(InteropError) as info:
        from_mlagents(_broken(change), "ml/Brain/checkpoint.pt")
    assert message in str(info.value) and "ml/Brain/checkpoint.pt" in str(info.value)
    assert "\n" not in str(info.value)


def test_our_weights_that_are_no_policy_are_refused() -> None:
    with pytest.raises(InteropError, match="not the state_dict of our actor-critic"):
        to_mlagents({"w": torch.zeros(2)}, True, 0)


def test_misfit_names_every_difference() -> None:
    found = Network(10, 2, 64, 3, False)
    assert settings_misfit(found, NetworkConfig()) == (
        "hidden_units 64 there, 128 here; num_layers 3 there, 2 here; "
        "normalize false there, true here"
    )
    assert settings_misfit(found, NetworkConfig(64, 3, False)) == ""
    assert found.misfit(Network(12, 3, 64, 3, False), ("obs_size", "action_size")) == (
        "obs_size 10 there, 12 here; action_size 2 there, 3 here"
    )


def test_log_sigma_and_mean_carry_the_action_scale() -> None:
    theta = trained_policy(RUNS[0]["network"]).state_dict()
    policy = to_mlagents(theta, True, 0)[POLICY]
    log_sigma = policy["action_model._continuous_distribution.log_sigma"]
    assert torch.allclose(log_sigma.flatten(), theta["log_std"] + math.log(3.0))
    assert torch.allclose(
        policy["action_model._continuous_distribution.mu.bias"], 3 * theta["actor.4.bias"]
    )
