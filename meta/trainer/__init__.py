"""meta-train as a library: `train(cfg, run_id)` validates the run, joins Ray if asked, runs it.

`preflight` validates a run before anything is written, `loop.MetaTrainer` owns a running run
and its outer loop, `inner` runs a meta-step's inner trainings; `meta.run.interrupt` holds
Ctrl-C while a meta-step commits.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from meta.config import Config
from meta.runtime.cluster import join_or_start_ray
from meta.runtime.threads import torch_threads
from meta.trainer.loop import MetaTrainer
from meta.trainer.preflight import TrainingPlan, plan_training

__all__ = ["MetaTrainer", "TrainingPlan", "plan_training", "train"]


def train(cfg: Config, run_id: str) -> Path:
    """Validate, then run meta-training in-process (what meta-train does after composing).

    The run has `cfg.torch_threads` torch threads (0: the caller's), as meta-train gives it;
    the caller's number is restored afterwards.
    """
    threads = cfg.torch_threads or torch.get_num_threads()
    with torch_threads(threads):
        return _train(cfg, run_id)


def _train(cfg: Config, run_id: str) -> Path:
    from omegaconf import OmegaConf

    checked = plan_training(cfg, run_id)
    resolved = {**asdict(cfg), "run_id": run_id}
    cluster = join_or_start_ray(cfg.runtime) if cfg.runtime.backend == "ray" else None
    try:
        trainer = MetaTrainer(checked, OmegaConf.to_yaml(resolved), resolved)
        try:
            return trainer.run()
        except BaseException:
            trainer.close()
            raise
    finally:
        checked.close()
        if cluster is not None:
            cluster.close()
