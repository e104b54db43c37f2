"""Chains stacked: trainings that continue Adam's state, follow a run's schedule and split their
areas across tasks (meta=joint's meta-steps) train in lockstep as each would alone."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from envs.tasks.stack import stackable_envs
from meta.algorithm.ppo.config import NetworkConfig, PPOConfig
from meta.algorithm.ppo.hyper import Hyper, RunSchedule
from meta.algorithm.ppo.loss import make_optimizer
from meta.algorithm.ppo.train import policy_for
from meta.algorithm.ppo.weights import cpu_weights
from meta.algorithm.reptile import Task
from meta.algorithm.request import TrainRequest, TrainResult
from meta.algorithm.stacked.optim import optimizer_steps
from meta.algorithm.stacked.train import same_shape, stackable, train_stacked
from meta.algorithm.training import train
from meta.config import EnvConfig
from meta.runtime.batched import stacks
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import Training, request_env

PPO = PPOConfig(max_steps=1024, buffer_size=512, batch_size=128, num_epoch=2)
NETWORK = NetworkConfig(hidden_units=32)
TOLERANCE = 1e-5
"""As tests/algorithm/test_stacked.py: the batched products round differently."""
POOL = EnvPool(EnvConfig(num_areas=8))
TASKS = (Task("FindTarget", {"goal_x": 0.5}), Task("FindTarget", {"motor_rotation": 40.0}))


def _chunk(k: int, seed: int, ppo: PPOConfig = PPO) -> TrainRequest:
    """Chunk k of a 4-chunk run of two tasks side by side, Adam's state given back."""
    start = Hyper.of(ppo)
    schedule = RunSchedule(start, Hyper(1e-5, 1e-4, 0.1), k * ppo.max_steps, 4 * ppo.max_steps)
    theta = cpu_weights(policy_for(POOL.env("FindTarget", {}, 0), NETWORK, seed=5))
    return TrainRequest(
        TASKS, theta, 100 * seed + k, ppo, NETWORK, schedule=schedule, returns_optimizer=True
    )


def _then(request: TrainRequest, result: TrainResult) -> TrainRequest:
    return request.carrying(weights=result.weights, optimizer_state=result.optimizer_state)


def _alone(request: TrainRequest) -> TrainResult:
    return train(request, request_env(POOL, request))


def _stacked(requests: list[TrainRequest]) -> list[TrainResult]:
    return train_stacked(requests, [request_env(POOL, r) for r in requests])


def _delta(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _moments(state: dict) -> dict[str, torch.Tensor]:
    return {f"{i}.{n}": s[n] for i, s in state["state"].items() for n in ("exp_avg", "exp_avg_sq")}


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_chain_of_joint_chunks_trains_stacked_as_each_alone(optimizer: str) -> None:
    ppo = replace(PPO, optimizer=optimizer, learning_rate=3e-4 if optimizer == "adam" else 0.05)
    firsts = [_chunk(0, seed, ppo) for seed in (1, 2, 3)]
    assert all(stackable(r) is None for r in firsts)
    alone = [_alone(r) for r in firsts]
    stacked = _stacked(firsts)
    seconds = [_then(_chunk(1, s, ppo), a) for s, a in zip((1, 2, 3), alone, strict=True)]
    for a, s in zip(alone, stacked, strict=True):
        assert _delta(a.weights, s.weights) < TOLERANCE
        assert s.optimizer_state is not None and a.optimizer_state is not None
        assert s.optimizer_state["param_groups"] == a.optimizer_state["param_groups"]
        assert optimizer_steps(s.optimizer_state) == optimizer_steps(a.optimizer_state)
        assert _moments(s.optimizer_state).keys() == _moments(a.optimizer_state).keys()
        if optimizer == "adam":
            assert optimizer_steps(a.optimizer_state) > 0
            assert _delta(_moments(a.optimizer_state), _moments(s.optimizer_state)) < TOLERANCE
    # the next chunk continues each one's Adam from the same state: alone and stacked agree
    again_alone = [_alone(r) for r in seconds]
    again_stacked = _stacked(seconds)
    for a, s, r in zip(again_alone, again_stacked, seconds, strict=True):
        assert _delta(a.weights, r.weights) > 100 * TOLERANCE  # it did train
        assert _delta(a.weights, s.weights) < TOLERANCE
        assert a.stats["steps"] == s.stats["steps"] == 2 * 512
    # the state given back loads into the sequential optimizer, as a checkpoint's does
    policy = policy_for(POOL.env("FindTarget", {}, 0), NETWORK, seed=5)
    make_optimizer(policy, 1e-3, optimizer).load_state_dict(again_stacked[0].optimizer_state)


def test_a_chained_member_trains_bitwise_the_same_whichever_others_share_its_stack() -> None:
    first = [_chunk(0, seed) for seed in (1, 2, 3)]
    pair, three = _stacked(first[:2]), _stacked(first)
    for a, b in zip(pair, three[:2], strict=True):
        assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)
        ma, mb = _moments(a.optimizer_state), _moments(b.optimizer_state)  # type: ignore[arg-type]
        assert all(torch.equal(ma[k], mb[k]) for k in ma)
    later = [_then(_chunk(1, s), r) for s, r in zip((1, 2), pair, strict=True)]
    alone_start = _then(_chunk(1, 3), _alone(first[2]))
    pair_again, three_again = _stacked(later), _stacked([*later, alone_start])
    for a, b in zip(pair_again, three_again[:2], strict=True):
        assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)


def test_chains_at_different_steps_or_task_counts_stack_apart() -> None:
    first = _chunk(0, 1)
    continued = _then(_chunk(1, 2), _alone(_chunk(0, 2)))
    one_task = replace(_chunk(0, 3), tasks=TASKS[:1])
    assert optimizer_steps(continued.optimizer_state) > 0
    assert not same_shape(first, continued) and not same_shape(first, one_task)
    assert same_shape(first, _chunk(0, 4))
    jobs = [Training(first), Training(continued), Training(one_task), Training(_chunk(0, 4))]
    assert stacks(jobs) == [[0, 3]]


def test_tasks_side_by_side_step_in_their_families_cores_bitwise_as_each_member_alone() -> None:
    mixed = (Task("CarryObject", {}), Task("FindTarget", {"goal_x": -0.3}))
    requests = [
        replace(_chunk(0, 1), tasks=mixed),
        _chunk(0, 2),
        replace(_chunk(0, 3), tasks=mixed[::-1], network=replace(NETWORK, normalize=True)),
    ]
    requests[2] = replace(requests[2], weights=None)  # a fresh start with a normaliser
    requests[:2] = [replace(r, network=requests[2].network, weights=None) for r in requests[:2]]

    def trained(merge: bool) -> list[TrainResult]:
        return train_stacked(requests, [request_env(POOL, r) for r in requests], merge=merge)

    assert stackable_envs([request_env(POOL, r) for r in requests])  # one core per family
    merged, apart = trained(True), trained(False)
    for m, s in zip(merged, apart, strict=True):
        assert all(torch.equal(m.weights[k], s.weights[k]) for k in s.weights)
        ms, ss = _moments(m.optimizer_state), _moments(s.optimizer_state)  # type: ignore[arg-type]
        assert all(torch.equal(ms[k], ss[k]) for k in ss)
        assert repr(m.updates) == repr(s.updates)  # NaN where a buffer finished no episode
        assert repr({**m.stats, "wall_time_s": 0}) == repr({**s.stats, "wall_time_s": 0})
    assert sum(m.stats["episodes"] for m in merged) > 0
