"""meta-train as a library: `train(cfg, run_id)` runs a run the way meta-train runs it.

`preflight` validates a run before anything is written, `session` takes the run's lock, joins
Ray if asked and turns every early stop into one line, `loop.MetaTrainer` owns a running run
and its outer loop, `dispatch` runs a meta-step's inner trainings, `seeds` trains a group of
seeds (`seeds=[...]`) in lockstep; `meta.run.interrupt` holds Ctrl-C while a meta-step commits.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from omegaconf import OmegaConf

from meta.config import Config
from meta.runtime.threads import torch_threads
from meta.trainer import session
from meta.trainer.loop import MetaTrainer
from meta.trainer.preflight import TrainingPlan, plan_training
from meta.trainer.session import Stopped

__all__ = ["MetaTrainer", "Stopped", "TrainingPlan", "plan_training", "train"]


def train(cfg: Config, run_id: str) -> Path:
    """Validate, then run meta-training in this process on meta-train's path (`session.run`).

    The run holds its lock, joins or starts Ray for runtime=ray, and stops early with a
    `Stopped` (its one line and exit code) as meta-train does; the caller's signal handlers
    are restored afterwards. The run has `cfg.torch_threads` torch threads (0: the caller's),
    as meta-train gives it; the caller's number is restored afterwards too.
    """
    threads = cfg.torch_threads or torch.get_num_threads()
    with torch_threads(threads):
        checked = plan_training(cfg, run_id)
        resolved = {**asdict(cfg), "run_id": run_id}
        return session.run(checked, OmegaConf.to_yaml(resolved), resolved, program=None)
