"""A meta-training run's plan: the configuration and run directory rules, validated up front.

It only checks: it writes nothing and starts nothing (Ray is joined or started by
`meta.runtime.cluster.join_or_start_ray`, when the run starts).
"""

from __future__ import annotations

from dataclasses import dataclass

from envs.constants import BEHAVIOR_NAME
from meta.algorithm import reptile
from meta.algorithm.ppo.policy import policy_for
from meta.algorithm.registry import learner_class
from meta.algorithm.selfplay.checks import check_families
from meta.config import Config
from meta.curriculum.lessons import EnvironmentParameters, parse_environment_parameters
from meta.observe.reporter import csv_tables
from meta.run.checkpoints import LATEST
from meta.run.directory import check, check_tables, latest_weights, resume_state, run_path
from meta.run.names import check_name
from meta.run.records import table_columns
from meta.runtime.envpool import EnvPool


@dataclass
class TrainingPlan:
    """Everything validated before the run directory is touched."""

    cfg: Config
    run_id: str
    sampler: reptile.TaskSampler
    parameters: EnvironmentParameters
    pool: EnvPool

    def close(self) -> None:
        """Close the driver's builds."""
        self.pool.close()


def plan_training(cfg: Config, run_id: str) -> TrainingPlan:
    """Validate the whole configuration and the run directory rules; write or start nothing."""
    cfg.validate()
    if cfg.seeds is not None:
        raise ValueError(
            "seeds=[...] names a group of runs, which meta-train trains; plan each one alone "
            "(seed=<s>, seeds=null)"
        )
    check_name(run_id)
    sampler = reptile.TaskSampler(cfg.meta.tasks, cfg.meta.split)
    parameters = parse_environment_parameters(cfg.environment_parameters, [BEHAVIOR_NAME])
    pool = EnvPool(cfg.env)
    learner_class(cfg.meta.algorithm).check(cfg)
    pool.check([t.name for t in cfg.meta.tasks])
    check_families([t.name for t in cfg.meta.tasks], cfg.ppo.self_play)
    check(cfg, run_id)
    if cfg.resume:
        extra, inner = table_columns(parameters.lesson_nums(), cfg.logger.per_update_csv)
        check_tables(run_path(cfg, run_id), csv_tables(extra, inner))
    if (cfg.initialize_from or cfg.resume) and cfg.env.backend == "native":
        _check_weights(cfg, run_id)
    return TrainingPlan(cfg, run_id, sampler, parameters, pool)


def _check_weights(cfg: Config, run_id: str) -> None:
    """initialize_from's and a resumed checkpoint's weights must fit this network.

    Builds are checked once launched. ML-Agents' checkpoints are mapped first; a network that
    differs (layer sizes, normalisation, observation or action size) is refused naming every
    difference.
    """
    import envs

    env = envs.make(cfg.meta.tasks[0].name)
    fresh = policy_for(env, cfg.network).state_dict()
    env.close()
    if cfg.resume:
        mismatch = reptile.mismatch(fresh, resume_state(run_path(cfg, run_id))["theta"])
        if mismatch:
            raise ValueError(
                f"resume=true: {run_path(cfg, run_id) / BEHAVIOR_NAME / LATEST} holds weights "
                f"of another network ({mismatch}); refused"
            )
    if cfg.initialize_from:
        sizes = (int(fresh["actor.0.weight"].shape[1]), int(fresh["log_std"].shape[0]))
        weights = latest_weights(cfg.results_dir, str(cfg.initialize_from), cfg.network, sizes)
        mismatch = reptile.mismatch(fresh, weights)
        if mismatch:
            raise ValueError(
                f"initialize_from={cfg.initialize_from}: its weights do not fit this network "
                f"({mismatch})"
            )
