"""meta-train as a library: `train(cfg, run_id)` runs a run the way meta-train runs it.

`preflight` validates a run before anything is written, `session` takes the run's lock, joins
Ray if asked and turns every early stop into one line, `loop.MetaTrainer` owns a running run
and its outer loop, `dispatch` runs a meta-step's inner trainings, `seeds` trains a group of
seeds (`seeds=[...]`) in lockstep; `meta.process.signals` holds Ctrl-C while a meta-step commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from omegaconf import OmegaConf

from meta.config import Config
from meta.process.compute import matmul_precision, torch_threads
from meta.trainer import session
from meta.trainer.loop import MetaTrainer
from meta.trainer.preflight import TrainingPlan, plan_training
from meta.trainer.session import Stopped

__all__ = ["MetaTrainer", "Stopped", "TrainingPlan", "plan_training", "train", "train_group"]


def train(cfg: Config, run_id: str) -> Path:
    """Validate, then run meta-training in this process on meta-train's path (`session.run`).

    The run holds its lock, joins or starts Ray for runtime=ray, and stops early with a
    `Stopped` (its one line and exit code) as meta-train does; the caller's signal handlers
    are restored afterwards. The run has `cfg.torch_threads` torch threads (0: the caller's) and
    `cfg.torch_matmul_precision`, as meta-train gives it; the caller's are restored afterwards.
    """
    threads = cfg.torch_threads or torch.get_num_threads()
    with torch_threads(threads), matmul_precision(cfg.torch_matmul_precision):
        start = _start(cfg, run_id)
        return session.run(start.plan, start.config_yaml, start.resolved, program=None)


def train_group(runs: Sequence[tuple[Config, str]], words: Sequence[str]) -> list[Path]:
    """Runs of one setting that differ in seed, each `(cfg, run_id)`, trained as one group
    (`session.run_group`, meta.trainer.seeds) the way `train` trains one; `words` is the
    program and overrides its lines give as the group's command."""
    threads = runs[0][0].torch_threads or torch.get_num_threads()
    with torch_threads(threads), matmul_precision(runs[0][0].torch_matmul_precision):
        starts: list[session.Start] = []
        try:
            for cfg, run_id in runs:
                starts.append(_start(cfg, run_id))
        except BaseException:
            for start in starts:
                start.plan.close()
            raise
        return session.run_group(starts, words, program=None)


def _start(cfg: Config, run_id: str) -> session.Start:
    """The run checked (`plan_training`) with the configuration it opens with."""
    resolved = {**asdict(cfg), "run_id": run_id}
    return session.Start(plan_training(cfg, run_id), OmegaConf.to_yaml(resolved), resolved)
