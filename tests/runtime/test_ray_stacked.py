"""runtime=ray: each actor trains its share of a stack as one stack, as runtime=local would."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
import torch

from meta.algorithm.ppo.weights import Weights
from meta.config import Config
from meta.runtime import jobs
from meta.runtime.jobs import shares
from meta.trainer import MetaTrainer, plan_training

Factory = Callable[..., Config]
BATCH = ("meta.meta_batch_size=4", "meta.steps=2")
TOLERANCE = 1e-5
"""max |Δθ| between stacks of other sizes (tests/algorithm/test_stacks.py's TOLERANCE)."""


def thetas(cfg: Config, run_id: str, kill_before: int | None = None) -> list[Weights]:
    """θ after each meta-step; on Ray, actor 1 killed before meta-step `kill_before`."""
    trainer = MetaTrainer(plan_training(cfg, run_id), "{}", {})
    try:
        out = []
        for k in range(cfg.meta.steps):
            if k == kill_before:
                os.kill(trainer.inner.start_executor().pids()[1], signal.SIGKILL)  # type: ignore[attr-defined]
            trainer.meta_step_once(k)
            out.append({name: value.clone() for name, value in trainer.theta.items()})
        assert trainer.inner.restarts == (kill_before is not None)
        return out
    finally:
        trainer.close()


def _max_delta(a: Weights, b: Weights) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_a_stack_is_cut_into_contiguous_shares_of_near_equal_size() -> None:
    assert shares([0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert shares([4, 5, 6, 7, 8], 3) == [[4, 5], [6, 7], [8]]
    assert shares([1, 2], 4) == [[1], [2]]


@pytest.mark.usefixtures("ray_cluster")
def test_each_actor_stacks_its_share_bitwise_as_in_process_and_a_lost_share_is_retried(
    tiny_config: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = thetas(tiny_config(*BATCH, "runtime=ray", "runtime.num_actors=2"), "ray", kill_before=1)
    whole = thetas(tiny_config(*BATCH), "whole")  # one stack of 4
    monkeypatch.setattr(jobs, "MAX_STACK", 2)  # stacks of 2, as the two actors' shares
    halves = thetas(tiny_config(*BATCH), "halves")
    monkeypatch.setattr(jobs, "MAX_STACK", 1)  # stacks of one: each training alone
    alone = thetas(tiny_config(*BATCH), "alone")
    for r, h, w, a in zip(ray, halves, whole, alone, strict=True):
        assert all(torch.equal(r[k], h[k]) for k in r)
        # a member's bits depend on its stack's size and on stacking at all, to rounding
        assert _max_delta(r, w) < TOLERANCE and _max_delta(r, a) < TOLERANCE
    assert _max_delta(ray[-1], alone[-1]) > 0  # the actors did stack
