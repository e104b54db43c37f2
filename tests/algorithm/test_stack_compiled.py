"""runtime.compile: a stack's update through torch.compile trains as the eager stack does, to
rounding, and keeps its guarantees bit for bit (any stack, any piece, one or two threads)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meta.algorithm.ppo import update
from meta.algorithm.request import Task, TrainRequest, TrainResult
from meta.config.ppo import PPOConfig
from meta.process.compute import torch_threads
from tests.algorithm.test_stacks import PPO, TOLERANCE, _alone, _delta, _requests, _same, _stacked

pytestmark = pytest.mark.slow  # the first compilation in a process takes seconds


def _compiled(requests: list[TrainRequest]) -> list[TrainResult]:
    return _stacked(requests, compiled=True)


@pytest.mark.parametrize(
    "ppo",
    [PPO, replace(PPO, optimizer="sgd", learning_rate=0.05), replace(PPO, max_grad_norm=0.01)],
    ids=["adam", "sgd", "clipped"],
)
def test_compiled_members_train_as_alone_and_as_the_eager_stack_to_rounding(
    ppo: PPOConfig,
) -> None:
    requests = _requests(ppo)
    alone = [_alone(r) for r in requests]
    eager, compiled = _stacked(requests), _compiled(requests)
    for a, e, c, r in zip(alone, eager, compiled, requests, strict=True):
        assert _delta(c.weights, r.weights) > 100 * TOLERANCE  # type: ignore[arg-type]
        assert _delta(a.weights, c.weights) < TOLERANCE
        assert _delta(e.weights, c.weights) < TOLERANCE
        assert a.stats["steps"] == c.stats["steps"] and a.stats["episodes"] == c.stats["episodes"]
    # the fused kernels round differently: compiling did change what ran
    assert any(_delta(e.weights, c.weights) > 0 for e, c in zip(eager, compiled, strict=True))


def test_a_compiled_member_is_bitwise_the_same_in_any_stack_piece_and_thread_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b, c = _requests(replace(PPO, max_grad_norm=0.05))
    d = replace(c, tasks=(Task("CarryObject", {"motor_rotation": 30.0}),), seed=7)
    pair = _compiled([a, b])  # deterministic, or the stacks below would differ from it
    with torch_threads(2):
        two_threads = _compiled([a, b])
    monkeypatch.setattr(update, "PIECE", 2)  # the four train as two pieces of two
    four = _compiled([c, b, d, a])
    for alone, among, threaded in (
        (pair[0], four[3], two_threads[0]),
        (pair[1], four[1], two_threads[1]),
    ):
        assert _same(alone.weights, among.weights)
        assert _same(alone.weights, threaded.weights)
