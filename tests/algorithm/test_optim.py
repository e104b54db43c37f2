"""The optimizers step as torch.optim's do, share their state_dicts, and skip torch._dynamo."""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import envs
from meta.algorithm.ppo import optim
from meta.algorithm.ppo.config import NetworkConfig
from meta.algorithm.ppo.loss import ADAM_EPS, make_optimizer
from meta.algorithm.ppo.optim import SGD, Adam
from meta.algorithm.ppo.policy import Policy
from meta.algorithm.ppo.train import policy_for

Make = Callable[[Policy, float], object]
TORCH: dict[str, Make] = {
    "adam": lambda p, lr: torch.optim.Adam(p.parameters(), lr=lr, eps=ADAM_EPS, fused=True),
    "sgd": lambda p, lr: torch.optim.SGD(p.parameters(), lr=lr),
}


def policy(seed: int = 3) -> Policy:
    """A small FindTarget policy."""
    return policy_for(envs.make("FindTarget", num_areas=2, seed=0), NetworkConfig(32), seed=seed)


def steps(model: Policy, optimizer: object, count: int, first: int = 0) -> None:
    """Gradient steps on fixed batches, the learning rate changed before each (log_std unused)."""
    for i in range(first, first + count):
        features = torch.randn(64, 10, generator=torch.Generator().manual_seed(i))
        optimizer.zero_grad()  # type: ignore[attr-defined]
        loss = model.mean_from(features).square().sum() + model.value_from(features).sum()
        loss.backward()
        for group in optimizer.param_groups:  # type: ignore[attr-defined]
            group["lr"] = 1e-3 / (1 + i)
        optimizer.step()  # type: ignore[attr-defined]


def assert_same_state(ours: dict, theirs: dict) -> None:
    """Equal hyperparameters, and equal slots bit for bit (dtype and device included)."""
    assert ours["param_groups"] == theirs["param_groups"]
    assert list(ours["state"]) == list(theirs["state"])
    for index, slots in theirs["state"].items():
        assert list(ours["state"][index]) == list(slots)
        for key, value in slots.items():
            mine = ours["state"][index][key]
            assert mine.dtype == value.dtype and mine.device == value.device
            assert torch.equal(mine, value), (index, key)


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_steps_and_state_equal_torch_optim_bit_for_bit(kind: str) -> None:
    a, b = policy(), policy()
    ours, theirs = make_optimizer(a, 1e-3, kind), TORCH[kind](b, 1e-3)
    assert_same_state(ours.state_dict(), theirs.state_dict())  # type: ignore[attr-defined]
    steps(a, ours, 5)
    steps(b, theirs, 5)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert a.log_std.grad is None and not any(
        torch.equal(x, y)
        for x, y in zip(a.parameters(), policy().parameters(), strict=True)
        if x is not a.log_std
    )
    assert_same_state(ours.state_dict(), theirs.state_dict())  # type: ignore[attr-defined]
    assert len(ours.state_dict()["state"]) == (len(list(a.parameters())) - 1) * (kind == "adam")


@pytest.mark.parametrize("direction", ["torch into ours", "ours into torch"])
def test_a_state_dict_of_either_continues_in_the_other(direction: str) -> None:
    a, b = policy(), policy()
    first = torch.optim.Adam(a.parameters(), lr=1e-3, eps=ADAM_EPS, fused=True)
    if direction == "ours into torch":
        first = Adam(a.parameters(), lr=1e-3, eps=ADAM_EPS, fused=True)  # type: ignore[assignment]
    steps(a, first, 3)
    b.load_state_dict(a.state_dict())
    second = make_optimizer(b, 0.5) if direction == "torch into ours" else TORCH["adam"](b, 0.5)
    second.load_state_dict(copy.deepcopy(first.state_dict()))  # type: ignore[attr-defined]
    assert second.param_groups[0]["lr"] == first.param_groups[0]["lr"]  # type: ignore[attr-defined]
    steps(a, first, 3, first=3)
    steps(b, second, 3, first=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_a_state_dict_for_other_parameters_is_refused() -> None:
    ours = make_optimizer(policy(), 1e-3)
    other = Adam([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    with pytest.raises(ValueError, match="optimizer state for \\[1\\] parameters"):
        ours.load_state_dict(other.state_dict())
    assert SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0).state_dict()["state"] == {}


@pytest.mark.integration
def test_an_inner_training_never_imports_torch_dynamo() -> None:
    # torch.optim.Optimizer's methods import it on first use: about 2 s of every process
    script = (
        "import sys, envs\n"
        "from meta.algorithm.request import TrainRequest\n"
        "from meta.algorithm.training import train\n"
        "from meta.algorithm.ppo.config import NetworkConfig, PPOConfig\n"
        "from meta.algorithm.ppo.train import policy_for\n"
        "env, net = envs.make('FindTarget', num_areas=4, seed=0), NetworkConfig(16)\n"
        "cfg = PPOConfig(max_steps=256, buffer_size=128, batch_size=64, num_epoch=1)\n"
        "train(TrainRequest((), policy_for(env, net).state_dict(), 0, cfg, net), env)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def _call(name: str) -> ast.Call:
    """optim.py's call of torch.optim's private step function `name`."""
    tree = ast.parse(Path(optim.__file__).read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]
    assert len(calls) == 1, name
    return calls[0]


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_the_private_step_functions_take_exactly_the_arguments_optim_passes(name: str) -> None:
    # torch.optim.adam.adam and torch.optim.sgd.sgd are private: their parameters change between
    # releases (pyproject.toml bounds torch to the releases this passed on)
    function = getattr(importlib.import_module(f"torch.optim.{name}"), name)
    params = list(inspect.signature(function).parameters.values())
    call = _call(name)
    positional = [p.name for p in params[: len(call.args)]]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[: len(call.args)]), positional
    assert {k.arg for k in call.keywords} == {p.name for p in params[len(call.args) :]}
