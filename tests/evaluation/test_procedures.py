"""Adaptation procedures: one env-step horizon for every update size; a start's log std."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from tinyconfig import TINY_EVAL

from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.rollout import NullTimers
from meta.algorithm.ppo.train import STEPS
from meta.algorithm.ppo.weights import cpu_weights
from meta.config import Config
from meta.config.evaluation import EvalConfig, Procedure
from meta.curriculum.lessons import parse_environment_parameters
from meta.evaluation.adapt import AdaptJob, Setting, adapt
from meta.evaluation.tasks import sample_tasks
from meta.observe.tags import LEARNING_RATE
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import run_request

BUDGETS = [0, 1, 2, 3, 4, 6, 8, 12, 16]


def setting(*procedures: Procedure) -> Setting:
    """meta-eval's setting with these procedures and the positive controls' budgets."""
    return Setting(Config(), EvalConfig(budgets=BUDGETS, adaptation=list(procedures)), seed=0)


def test_smaller_updates_continue_to_the_largest_update_sizes_horizon() -> None:
    small, large = Procedure(buffer_size=512), Procedure(buffer_size=2048)
    both = setting(small, large)
    assert both.budgets(large) == BUDGETS
    assert both.budgets(small) == [*BUDGETS, 24, 32, 48, 64]
    steps = {b * 2048 for b in BUDGETS}
    assert steps <= {b * 512 for b in both.budgets(small)}


def test_one_update_size_keeps_the_budgets_as_given() -> None:
    assert setting(Procedure(buffer_size=512)).budgets(Procedure(buffer_size=512)) == BUDGETS
    assert setting(Procedure()).budgets() == BUDGETS


def test_a_size_that_does_not_divide_rounds_budgets_up() -> None:
    small, large = Procedure(buffer_size=768), Procedure(buffer_size=2048)
    budgets = setting(small, large).budgets(small)
    assert budgets[len(BUDGETS) :] == [22, 32, 43]  # 8, 12, 16 updates of 2,048 in 768s
    assert budgets[-1] * 768 >= 16 * 2048


def test_a_procedures_log_std_is_the_starts_before_adapting(
    tiny_config: Callable[..., Config],
) -> None:
    cfg = tiny_config(*TINY_EVAL, "eval.deterministic=false", "eval.eval_episodes=16")
    base = Setting(cfg, cfg.eval, seed=0)
    job = sample_tasks(base, parse_environment_parameters({}, [BEHAVIOR_NAME]))[
        "FindTarget", "test"
    ][0]
    env = EnvPool(cfg.env).env("FindTarget", job.task.params, 0)
    env.reset()
    start = cpu_weights(policy_for(env, cfg.network, seed=1))
    start["log_std"] = torch.full_like(start["log_std"], -4.0)

    def rewards(procedure: Procedure) -> list[float]:
        rows = adapt(EnvPool(cfg.env), AdaptJob(base, job, "m", start, 0, procedure=procedure))
        return [r.mean_reward for r in rows]

    own = rewards(Procedure())
    assert rewards(Procedure(log_std=-4.0)) == own  # the start's own value: nothing changes
    assert rewards(Procedure(log_std=0.0)) != own  # a fresh policy's spread: other episodes
    assert base.label(Procedure(log_std=0.0)).endswith("buffer=128 log_std=0")


def test_log_std_is_refused_where_it_means_nothing() -> None:
    with pytest.raises(ValueError, match=r"eval.adaptation\[0\].log_std must be a finite number"):
        Procedure(log_std=math.nan).validate("eval.adaptation[0]")


def test_a_procedures_ppo_and_label_carry_its_epochs_batch_and_resets() -> None:
    procedure = Procedure(num_epoch=5, batch_size=64, reset=["value_head", "normalizer"])
    base = setting(procedure)
    ppo = base.ppo(procedure)
    assert (ppo.num_epoch, ppo.batch_size) == (5, 64)
    assert base.ppo().num_epoch == Config().ppo.num_epoch
    label = base.label(procedure)
    assert label.endswith("buffer=2048 epochs=5 batch=64 reset=value_head+normalizer")
    assert base.label(Procedure()) == "adam lr=0.0003 buffer=2048"  # as before: no new words


@pytest.mark.parametrize(
    ("procedure", "message"),
    [
        (Procedure(reset=["value_net"]), r"eval.adaptation\[0\].reset: unknown reset 'value_net'"),
        (Procedure(reset=["normalizer"] * 2), "names a reset twice"),
        (Procedure(num_epoch=0), r"num_epoch must be > 0"),
    ],
)
def test_bad_procedure_fields_are_named(procedure: Procedure, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        procedure.validate("eval.adaptation[0]")


def test_a_linear_schedule_reaches_the_adaptations_ppo_and_its_label() -> None:
    linear = Procedure(learning_rate=0.01, learning_rate_schedule="linear")
    base = setting(linear)
    assert base.ppo(linear).learning_rate_schedule == "linear"
    assert base.ppo(linear).max_steps == 16 * 2048  # it decays over the largest budget
    assert base.ppo().learning_rate_schedule == "constant"  # null: constant, as before
    assert base.ppo(Procedure(learning_rate_schedule="constant")).learning_rate_schedule == (
        "constant"
    )
    assert base.label(linear) == "adam lr=0.01 buffer=2048 schedule=linear"
    assert base.label(Procedure(learning_rate=0.01)) == "adam lr=0.01 buffer=2048"


def test_a_linear_schedule_decays_the_adaptations_learning_rate_as_ppos_schedule(
    tiny_config: Callable[..., Config],
) -> None:
    cfg = tiny_config(*TINY_EVAL, "eval.budgets=[0,1,3]")
    base = Setting(cfg, cfg.eval, seed=0)
    job = sample_tasks(base, parse_environment_parameters({}, [BEHAVIOR_NAME]))[
        "FindTarget", "test"
    ][0]

    def trained(procedure: Procedure) -> list[dict[str, float]]:
        adapt_job = AdaptJob(base, job, "m", None, 0, procedure=procedure)
        return run_request(adapt_job.request(), EnvPool(cfg.env), NullTimers()).updates

    linear = Procedure(learning_rate=0.01, learning_rate_schedule="linear")
    updates, ppo = trained(linear), base.ppo(linear)
    decayed = [u[LEARNING_RATE] for u in updates]
    # each update reads the schedule at the agent-steps done before its buffer
    before = [0.0, *(u[STEPS] for u in updates[:-1])]
    expected = [Hyper.of(ppo).after(ppo, int(s), ppo.max_steps).learning_rate for s in before]
    assert len(decayed) == 3 and decayed == pytest.approx(expected)
    assert decayed[0] == pytest.approx(0.01) and decayed[-1] < decayed[1] < decayed[0]
    constant = [u[LEARNING_RATE] for u in trained(Procedure(learning_rate=0.01))]
    assert constant == pytest.approx([0.01] * 3)


def test_an_unknown_schedule_is_named() -> None:
    with pytest.raises(
        ValueError, match=r"eval.adaptation\[0\].learning_rate_schedule: unknown schedule 'cosine'"
    ):
        Procedure(learning_rate_schedule="cosine").validate("eval.adaptation[0]")
    with pytest.raises(ValueError, match=r"eval.joint_ppo\[0\].learning_rate_schedule: an adapt"):
        EvalConfig(joint_ppo=[Procedure(learning_rate_schedule="linear")]).validate()
