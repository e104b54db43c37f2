"""Tiny configurations for the tests: the real Hydra composition, shrunk to seconds.

A module of its own (not conftest.py, which several test folders have) so tests import it
by name.
"""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from meta.cli import CONFIG_DIR, register_configs
from meta.config import Config

TINY = ["experiment=tiny", "logger=quiet"]
TINY_EVAL = [
    "eval.budgets=[0,1]",
    "eval.seeds=2",
    "eval.tasks_per_family=1",
    "eval.splits=[test]",
    "eval.buffer_size=128",
    "eval.eval_episodes=4",
    "eval.bootstrap_samples=100",
]
"""meta-eval in seconds: one held-out task per family, two seeds, budgets 0 and 1."""
TINY_MEASURE = [*(a for a in TINY_EVAL if not a.startswith("eval.budgets=")), "eval.budgets=[0]"]
"""TINY_EVAL measuring the starts without adapting them, for tests of what comes before."""


def compose_config(overrides: list[str]) -> Config:
    """Compose conf/config.yaml with overrides, as meta-train does, into the dataclasses."""
    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


TINY_SEARCH = [
    "hparams_search=reptile_optuna",
    *TINY,
    "eval.budgets=[0,1]",
    "eval.seeds=2",
    "eval.tasks_per_family=1",
    "eval.buffer_size=256",
    "eval.eval_episodes=8",
    "optimized_metric=success_iqm@1",
]
"""A search whose trials are tiny runs, each adapting on one task per family for a moment."""
