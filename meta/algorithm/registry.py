"""Every meta-learner by its `meta.algorithm` name: the one place that reads the name.

An entry names its class by import path, so that checking a configuration loads neither torch
nor the learners (meta-train refuses a bad value in a moment); the few traits the config's
checks need sit beside it, and `validate` checks a configuration with them. A new meta-learner
is a subclass and one line here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meta.config.ppo import positive

if TYPE_CHECKING:
    from meta.algorithm.reptile import MetaLearner
    from meta.config import Config


@dataclass(frozen=True)
class Entry:
    """Where a meta-learner's class lives, and what its configuration may hold."""

    target: str
    """`module:Class`."""
    interpolates: bool = True
    """Whether meta.outer_lr is a fraction of the way to the trained weights (in (0, 1])
    rather than a step along a gradient (any size > 0)."""
    no_games: str = ""
    """Why it cannot train a game of teams ("": it can)."""
    joint_baseline: bool = False
    """Whether its runs are the multi-task baseline meta-eval compares the others with."""


LEARNERS: dict[str, Entry] = {
    "reptile": Entry("meta.algorithm.reptile:Reptile"),
    "fomaml": Entry(
        "meta.algorithm.fomaml:FOMAML",
        interpolates=False,
        no_games="FOMAML's meta-gradient is one behavior's PPO loss",
    ),
    "joint": Entry("meta.algorithm.joint:Joint", joint_baseline=True),
    "single": Entry("meta.algorithm.joint:Single"),
}


def entry(name: str) -> Entry:
    """The registry's entry for `name`; ValueError naming the known ones."""
    if name not in LEARNERS:
        raise ValueError(f"meta.algorithm: unknown {name!r} (use one of {tuple(LEARNERS)})")
    return LEARNERS[name]


def learner_class(name: str) -> type[MetaLearner]:
    """The class of meta-learner `name` (imported on first use)."""
    module, _, attribute = entry(name).target.partition(":")
    cls: type[MetaLearner] = getattr(importlib.import_module(module), attribute)
    return cls


def validate(cfg: Config) -> None:
    """Raise ValueError naming the first invalid field of `cfg`, its meta-learner's included:
    a known name, and what the learner's traits allow of the rest."""
    learner = entry(cfg.meta.algorithm)
    cfg.validate()
    meta = cfg.meta
    if learner.interpolates:
        meta.check_fractions()
    else:
        positive("meta.outer_lr", meta.outer_lr)  # a step along a gradient, not a fraction
        if meta.final_outer_lr < 0:
            raise ValueError(f"meta.outer_lr_final must be >= 0, got {meta.outer_lr_final}")
    if learner.no_games:
        meta.check_games(learner.no_games)
        if cfg.ppo.self_play is not None:
            raise ValueError(
                f"meta={meta.algorithm} with ppo.self_play: {learner.no_games} "
                "and cannot train a game of teams (use meta=reptile)"
            )
