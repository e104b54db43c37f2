"""Stacked trainings (runtime=batched): each member as its request trains alone, to rounding."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.train import policy_for
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.reptile import Task
from meta.algorithm.request import TrainRequest
from meta.algorithm.stacked import update
from meta.algorithm.stacked.network import pieces
from meta.algorithm.stacked.train import stackable, train_stacked
from meta.algorithm.training import train
from meta.config import EnvConfig
from meta.observe.tags import SUCCESS
from meta.runtime.batched import MAX_STACK, stacks, units
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import Call, Training

PPO = PPOConfig(max_steps=1024, buffer_size=512, batch_size=128, num_epoch=2)
NETWORK = NetworkConfig(hidden_units=32)
TOLERANCE = 1e-5
"""max |Δ| over the weights after a training: the batched products round differently."""


def _requests(ppo: PPOConfig = PPO, **fields: object) -> tuple[EnvPool, list[TrainRequest]]:
    pool = EnvPool(EnvConfig(num_areas=8))
    theta = cpu_weights(policy_for(pool.env("FindTarget", {}, 0), NETWORK, seed=5))
    tasks = [Task("FindTarget", {}), Task("CarryObject", {}), Task("FindTarget", {"goal_x": 0.5})]
    requests = [
        TrainRequest((task,), theta, 40 + i, ppo, NETWORK, **fields)  # type: ignore[arg-type]
        for i, task in enumerate(tasks)
    ]
    return pool, requests


def _alone_and_stacked(pool: EnvPool, requests: list[TrainRequest]) -> tuple[list, list]:
    def env(r: TrainRequest):  # type: ignore[no-untyped-def]
        return pool.env(r.tasks[0].family, r.tasks[0].params, r.seed)

    alone = [train(r, env(r)) for r in requests]
    return alone, train_stacked(requests, [env(r) for r in requests])


def _max_delta(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize(
    "ppo",
    [PPO, replace(PPO, optimizer="sgd", learning_rate=0.05), replace(PPO, max_grad_norm=0.01)],
    ids=["adam", "sgd", "clipped"],
)
def test_each_member_trains_as_its_request_alone_to_rounding(ppo: PPOConfig) -> None:
    pool, requests = _requests(ppo)
    alone, stacked = _alone_and_stacked(pool, requests)
    for a, s, r in zip(alone, stacked, requests, strict=True):
        assert _max_delta(a.weights, r.weights) > 100 * TOLERANCE  # it did train
        assert _max_delta(a.weights, s.weights) < TOLERANCE
        assert a.stats["steps"] == s.stats["steps"] and a.stats["episodes"] == s.stats["episodes"]
        assert a.stats[SUCCESS] == pytest.approx(s.stats[SUCCESS], nan_ok=True)
    # members differ from each other: each has its own task and random stream
    assert _max_delta(stacked[0].weights, stacked[1].weights) > 100 * TOLERANCE


def test_stacked_training_is_deterministic_and_keeps_snapshots() -> None:
    pool, requests = _requests(updates=2, snapshots=(0, 2))
    first, again = (
        train_stacked(
            requests, [pool.env(r.tasks[0].family, r.tasks[0].params, r.seed) for r in requests]
        )
        for _ in range(2)
    )
    for a, b, r in zip(first, again, requests, strict=True):
        assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)
        assert sorted(a.snapshots) == [0, 2]
        assert all(torch.equal(a.snapshots[0][k], r.weights[k]) for k in r.weights)
        assert all(torch.equal(a.snapshots[2][k], a.weights[k]) for k in a.weights)


def test_tasks_stepped_as_one_core_train_bitwise_as_each_environment_by_itself() -> None:
    # FOMAML's meta-gradient collects a buffer more from each environment after the training,
    # so it also checks that each environment goes on from where the stack left it
    pool, (a, b, c) = _requests(meta_gradient=True, snapshots=(1,))
    hidden = replace(c, tasks=(Task("FindTarget", {"hidden_goal": 1, "goal_x": -0.4}),), seed=3)
    requests = [a, b, c, hidden, replace(b, seed=11)]

    def trained(merge: bool) -> list:  # type: ignore[type-arg]
        envs = [pool.env(r.tasks[0].family, r.tasks[0].params, r.seed) for r in requests]
        return train_stacked(requests, envs, merge=merge)

    merged, apart = trained(True), trained(False)
    for m, s in zip(merged, apart, strict=True):
        assert m.meta_gradient is not None and s.meta_gradient is not None
        for got, want in ((m.weights, s.weights), (m.meta_gradient, s.meta_gradient)):
            assert all(torch.equal(got[k], want[k]) for k in want)
        assert all(torch.equal(m.snapshots[1][k], s.snapshots[1][k]) for k in s.snapshots[1])
        assert repr(m.updates) == repr(s.updates)  # NaN where a buffer finished no episode
        assert repr({**m.stats, "wall_time_s": 0}) == repr({**s.stats, "wall_time_s": 0})
    assert sum(m.stats["episodes"] for m in merged) > 0


def test_requests_that_cannot_stack_say_why() -> None:
    _, (request, *_) = _requests()
    assert stackable(request) is None
    assert "per_dimension" in str(
        stackable(replace(request, ppo=replace(PPO, ratio="per_dimension")))
    )


def test_only_requests_of_one_setting_stack_together() -> None:
    _, (a, b, c) = _requests()
    other = replace(a, ppo=replace(PPO, buffer_size=256))
    two = replace(c, tasks=(Task("FindTarget", {}), Task("CarryObject", {})))
    jobs = [Training(a), Training(other), Training(b), Call(abs, -1), Training(two)]
    assert stacks([*jobs, Training(replace(other, seed=9))]) == [[0, 2], [1, 5]]
    assert stacks(jobs) == [[0, 2]]  # a stack of one is no stack


def test_a_member_trains_bitwise_the_same_whichever_others_share_its_stack() -> None:
    pool, (a, b, c) = _requests(replace(PPO, max_grad_norm=0.05))  # a clip acting every step
    d = replace(c, tasks=(Task("CarryObject", {"motor_rotation": 30.0}),), seed=7)

    def trained(requests: list[TrainRequest]) -> list:  # type: ignore[type-arg]
        envs = [pool.env(r.tasks[0].family, r.tasks[0].params, r.seed) for r in requests]
        return train_stacked(requests, envs)

    pair, four = trained([a, b]), trained([c, b, d, a])
    for alone, among in ((pair[0], four[3]), (pair[1], four[1])):
        assert all(torch.equal(alone.weights[k], among.weights[k]) for k in alone.weights)


def test_more_than_a_full_stack_splits_evenly_leaving_none_alone() -> None:
    _, (request, *_) = _requests()
    jobs = [Training(replace(request, seed=i)) for i in range(MAX_STACK + 1)]
    assert [len(s) for s in stacks(jobs)] == [33, 32]
    assert sorted(i for s in stacks(jobs) for i in s) == list(range(MAX_STACK + 1))


@pytest.mark.parametrize("k", [1, 2, 5, 8, 9, 16, 17, 64])
def test_pieces_cover_the_stack_and_none_holds_one_member_of_several(k: int) -> None:
    parts = pieces(k, 8)
    assert [i for part in parts for i in range(k)[part]] == list(range(k))
    sizes = [part.stop - part.start for part in parts]
    assert max(sizes) - min(sizes) <= 1 and (k < 8 or min(sizes) >= 8) and max(sizes) < max(16, k)


def test_a_stack_trained_by_pieces_is_bitwise_the_stack_trained_in_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool, (a, b, c) = _requests(replace(PPO, max_grad_norm=0.05))
    requests = [a, b, c, replace(a, seed=3), replace(b, seed=4)]

    def trained() -> list:  # type: ignore[type-arg]
        envs = [pool.env(r.tasks[0].family, r.tasks[0].params, r.seed) for r in requests]
        return train_stacked(requests, envs)

    whole = trained()
    monkeypatch.setattr(update, "PIECE", 2)  # pieces of 3 and 2 members, gradients added in place
    assert update.pieces(len(requests), update.PIECE) == [slice(0, 3), slice(3, 5)]
    by_pieces = trained()
    for one, other in zip(whole, by_pieces, strict=True):
        assert all(torch.equal(one.weights[k], other.weights[k]) for k in one.weights)
        # NaN where no episode ended in a buffer: compared as text, NaN equals NaN
        assert repr(one.updates) == repr(other.updates)


@pytest.mark.parametrize(
    ("size", "parts", "cut"), [(4, 2, [2, 2]), (3, 2, [3]), (2, 4, [2]), (5, 2, [3, 2])]
)
def test_workers_share_a_stack_and_none_trains_alone(size: int, parts: int, cut: list[int]) -> None:
    _, (request, *_) = _requests()
    jobs = [Training(replace(request, seed=i)) for i in range(size)]
    shared = units(jobs, parts)
    assert [len(where) for where, _ in shared] == cut
    assert sorted(i for where, _ in shared for i in where) == list(range(size))
