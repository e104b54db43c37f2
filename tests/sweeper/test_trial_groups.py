"""A batch's trials train together only where they share what a group shares."""

from __future__ import annotations

from collections.abc import Callable

from hydra_plugins.meta_harness_sweeper._together import _groups
from meta.config import Config
from meta.trainer.preflight import plan_training
from meta.trainer.session import Start


def test_trials_of_other_threads_or_environments_train_in_groups_of_their_own(
    tiny_config: Callable[..., Config],
) -> None:
    settings = [
        ["ppo.learning_rate=0.001"],
        ["torch_threads=2"],
        ["ppo.learning_rate=0.002", "meta.outer_lr=0.5"],
        ["env.num_areas=2"],
        ["torch_threads=2", "ppo.beta=0.01"],
    ]
    starts = {}
    for n, overrides in enumerate(settings):
        plan = plan_training(tiny_config(*overrides), f"trial_{n}")
        starts[n] = Start(plan, "", {})
    try:
        assert _groups(starts) == [[0, 2], [1, 4], [3]]
    finally:
        for start in starts.values():
            start.plan.close()
