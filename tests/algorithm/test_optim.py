"""The optimizer steps as torch.optim's does, shares its state_dicts, and skips torch._dynamo."""

from __future__ import annotations

import ast
import copy
import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.optim.adam import adam

import envs
from meta.algorithm.ppo import optim
from meta.algorithm.ppo.network import Policy, PolicyStack, policy_for
from meta.algorithm.ppo.optim import StackOptimizer, optimizer_steps
from meta.config.ppo import NetworkConfig, PPOConfig
from tests.algorithm.stacking import optimizer_for, stack_of
from tests.algorithm.test_stacks import TOLERANCE

ADAM_EPS = PPOConfig().adam_epsilon

Make = Callable[[Policy, float], torch.optim.Optimizer]
TORCH: dict[str, Make] = {
    "adam": lambda p, lr: torch.optim.Adam(p.parameters(), lr=lr, eps=ADAM_EPS, fused=True),
    "sgd": lambda p, lr: torch.optim.SGD(p.parameters(), lr=lr),
}


def policy(seed: int = 3) -> Policy:
    """A small FindTarget policy."""
    return policy_for(envs.make("FindTarget", num_areas=2, seed=0), NetworkConfig(32), seed=seed)


def _loss(model: Policy | PolicyStack, features: torch.Tensor) -> torch.Tensor:
    """A loss of every parameter."""
    if isinstance(model, PolicyStack):
        mean, value = model.mean_from(features), model.value_from(features)
    else:  # the module's own layers: the products a stack of one takes
        mean, value = model.actor(features), model.critic(features)[:, 0]
    return mean.square().sum() + value.sum() + model.log_std.sum()


def steps(model: Policy, optimizer: torch.optim.Optimizer, count: int, first: int = 0) -> None:
    """Gradient steps on fixed batches, the learning rate changed before each."""
    for i in range(first, first + count):
        features = torch.randn(64, 10, generator=torch.Generator().manual_seed(i))
        optimizer.zero_grad()
        _loss(model, features).backward()
        for group in optimizer.param_groups:
            group["lr"] = 1e-3 / (1 + i)
        optimizer.step()


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


def test_a_fresh_state_is_torch_optims() -> None:
    for kind in ("adam", "sgd"):
        ours = optimizer_for(stack_of(policy()), PPOConfig(optimizer=kind, adam_epsilon=ADAM_EPS))
        assert_same_state(ours.member_state(0, 1e-3), TORCH[kind](policy(), 1e-3).state_dict())


@pytest.mark.parametrize("direction", ["torch into ours", "ours into torch"])
def test_a_state_dict_of_either_continues_in_the_other(direction: str) -> None:
    # a stack of one, bit for bit
    cfg = PPOConfig(adam_epsilon=ADAM_EPS)
    model = policy()
    if direction == "torch into ours":
        first = TORCH["adam"](model, 1e-3)
        steps(model, first, 3)
        state = first.state_dict()
    else:
        stack = stack_of(model)
        ours = optimizer_for(stack, cfg)
        stack_steps(stack, ours, 3)
        model.load_state_dict(stack.weights(0))
        state = ours.member_state(0, 1e-3 / 3)
    a, b = policy(), policy()
    a.load_state_dict(model.state_dict())
    theirs = TORCH["adam"](a, 0.5)
    theirs.load_state_dict(copy.deepcopy(state))
    steps(a, theirs, 3, first=3)
    stack = stack_of(model)
    ours = optimizer_for(stack, cfg)
    ours.load([copy.deepcopy(state)])
    stack_steps(stack, ours, 3, first=3)
    b.load_state_dict(stack.weights(0))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert_same_state(ours.member_state(0, 1e-3 / 6), theirs.state_dict())


@pytest.mark.integration
def test_an_inner_training_never_imports_torch_dynamo() -> None:
    # torch.optim.Optimizer's methods import it on first use: about 2 s of every process
    script = (
        "import sys, envs\n"
        "from meta.algorithm.request import TrainRequest\n"
        "from meta.algorithm.training import train\n"
        "from meta.config.ppo import NetworkConfig, PPOConfig\n"
        "from meta.algorithm.ppo.network import policy_for\n"
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


def test_the_private_step_function_takes_exactly_the_arguments_optim_passes() -> None:
    # torch.optim.adam.adam is private: its parameters change between releases (pyproject.toml
    # bounds torch to the releases this passed on)
    params = list(inspect.signature(adam).parameters.values())
    call = _call("adam")
    positional = [p.name for p in params[: len(call.args)]]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[: len(call.args)]), positional
    assert {k.arg for k in call.keywords} == {p.name for p in params[len(call.args) :]}


def stack_steps(stack: PolicyStack, optimizer: StackOptimizer, count: int, first: int = 0) -> None:
    """`steps` for every member of a stack: member i at learning rate (1 + i) times member 0's."""
    for i in range(first, first + count):
        features = torch.randn(64, 10, generator=torch.Generator().manual_seed(i))
        x = features.expand(stack.k, 64, 10)
        optimizer.zero_grad()
        _loss(stack, x).backward()
        optimizer.step([(1 + m) * 1e-3 / (1 + i) for m in range(stack.k)])


def _scaled_steps(
    model: Policy, optimizer: torch.optim.Optimizer, count: int, factor: float
) -> None:
    """`steps` at `factor` times their learning rates."""
    for i in range(count):
        features = torch.randn(64, 10, generator=torch.Generator().manual_seed(i))
        optimizer.zero_grad()
        _loss(model, features).backward()
        for group in optimizer.param_groups:
            group["lr"] = factor * 1e-3 / (1 + i)
        optimizer.step()


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_a_stack_of_one_steps_as_torch_optim_bit_for_bit_and_of_three_to_rounding(
    kind: str,
) -> None:
    cfg = PPOConfig(optimizer=kind, adam_epsilon=ADAM_EPS)
    one = stack_of(policy())
    optimizer = optimizer_for(one, cfg)
    stack_steps(one, optimizer, 5)
    alone = policy()
    theirs = TORCH[kind](alone, 1e-3)
    steps(alone, theirs, 5)
    assert all(torch.equal(one.weights(0)[k], v) for k, v in alone.state_dict().items())
    assert_same_state(optimizer.member_state(0, 1e-3 / 5), theirs.state_dict())
    three = stack_of(policy(), policy(4), policy(5))
    optimizer = optimizer_for(three, cfg)
    stack_steps(three, optimizer, 5)
    for i, seed in enumerate((3, 4, 5)):
        alone = policy(seed)
        theirs = TORCH[kind](alone, 1e-3)
        _scaled_steps(alone, theirs, 5, 1 + i)
        for key, value in alone.state_dict().items():
            torch.testing.assert_close(three.weights(i)[key], value, rtol=0, atol=TOLERANCE)
        state = optimizer.member_state(i, (1 + i) * 1e-3 / 5)
        want = theirs.state_dict()
        assert state["param_groups"] == want["param_groups"]
        assert optimizer_steps(state) == optimizer_steps(want) == (5 if kind == "adam" else 0)
        for index, slots in want["state"].items():
            for name, value in slots.items():
                torch.testing.assert_close(
                    state["state"][index][name], value, rtol=1e-5, atol=TOLERANCE
                )


def test_a_stack_continues_each_members_state_at_its_own_step_count() -> None:
    # member 0 continues an optimizer of 3 steps, member 1 one of 1 step, member 2 a fresh one;
    # each continues as torch.optim would from that state, to rounding; a stack of one as
    # torch.optim, bit for bit
    cfg = PPOConfig(adam_epsilon=ADAM_EPS)
    before: list[tuple[Policy, dict | None]] = []
    for seed, taken in ((3, 3), (4, 1), (5, 0)):
        model = policy(seed)
        state = None
        if taken:
            first = TORCH["adam"](model, 1e-3)
            steps(model, first, taken)
            state = copy.deepcopy(first.state_dict())
        before.append((model, state))
    stack = stack_of(*(m for m, _ in before))
    optimizer = optimizer_for(stack, cfg)
    optimizer.load([s for _, s in before])
    assert optimizer.steps == [3, 1, 0]
    stack_steps(stack, optimizer, 3, first=3)
    assert optimizer.steps == [6, 4, 3]
    for i, (model, state) in enumerate(before):
        alone = policy()
        alone.load_state_dict(model.state_dict())
        theirs = TORCH["adam"](alone, 1e-3)
        if state is not None:
            theirs.load_state_dict(copy.deepcopy(state))
        for j in range(3, 6):
            features = torch.randn(64, 10, generator=torch.Generator().manual_seed(j))
            theirs.zero_grad()
            _loss(alone, features).backward()
            for group in theirs.param_groups:
                group["lr"] = (1 + i) * 1e-3 / (1 + j)
            theirs.step()
        for key, value in alone.state_dict().items():
            torch.testing.assert_close(stack.weights(i)[key], value, rtol=0, atol=TOLERANCE)
        assert optimizer_steps(optimizer.member_state(i, 1e-3)) == optimizer_steps(
            theirs.state_dict()
        )
    one = stack_of(before[0][0])
    single = optimizer_for(one, cfg)
    single.load([before[0][1]])
    stack_steps(one, single, 3, first=3)
    alone = policy()
    alone.load_state_dict(before[0][0].state_dict())
    theirs = TORCH["adam"](alone, 1e-3)
    theirs.load_state_dict(copy.deepcopy(before[0][1]))
    steps(alone, theirs, 3, first=3)
    assert all(torch.equal(one.weights(0)[k], v) for k, v in alone.state_dict().items())


def test_an_optimizer_state_of_mixed_step_counts_is_refused() -> None:
    model = policy()
    first = TORCH["adam"](model, 1e-3)
    steps(model, first, 2)
    state = copy.deepcopy(first.state_dict())
    assert optimizer_steps(state) == 2 and optimizer_steps(None) == 0
    state["state"][next(iter(state["state"]))]["step"] = torch.tensor(5.0)
    with pytest.raises(ValueError, match=r"took \[2, 5\] steps"):
        optimizer_steps(state)


def test_a_member_that_sits_out_keeps_its_weights_moments_and_step_count() -> None:
    # buffers of pieces: a member with fewer minibatches sits out the remaining steps
    stack = stack_of(policy(), policy(4), policy(5))
    optimizer = optimizer_for(stack, PPOConfig(adam_epsilon=ADAM_EPS))
    stack_steps(stack, optimizer, 2)
    before = [stack.weights(i) for i in range(3)]
    moments = [optimizer.member_state(i, 1e-3) for i in range(3)]
    features = torch.randn(3, 64, 10, generator=torch.Generator().manual_seed(9))
    optimizer.zero_grad()
    _loss(stack, features).backward()
    optimizer.step([1e-3] * 3, active=[True, False, True])
    assert optimizer.steps == [3, 2, 3]
    assert all(torch.equal(stack.weights(1)[k], v) for k, v in before[1].items())
    assert_same_state(optimizer.member_state(1, 1e-3), moments[1])
    for i in (0, 2):
        assert not torch.equal(stack.weights(i)["actor.0.weight"], before[i]["actor.0.weight"])


def test_a_stack_of_several_refuses_a_state_for_other_parameters() -> None:
    other = torch.nn.Parameter(torch.zeros(2))
    other.grad = torch.ones(2)
    alien = torch.optim.Adam([other], lr=1e-3)
    alien.step()  # one parameter's moments, the shape of a FindTarget log std
    with pytest.raises(ValueError, match="optimizer state for \\[1\\] parameters"):
        optimizer_for(stack_of(policy()), PPOConfig()).load([alien.state_dict()])
    three = optimizer_for(stack_of(policy(), policy(), policy()), PPOConfig())
    with pytest.raises(ValueError, match="optimizer state for \\[1\\] parameters"):
        three.load([alien.state_dict()] * 3)
