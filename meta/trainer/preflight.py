"""A meta-training run's plan: the configuration and run directory rules, validated up front.

It only checks: it writes nothing and starts nothing (Ray is joined or started by
`meta.runtime.cluster.join_or_start_ray`, when the run starts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlagents_envs.base_env import BehaviorSpec

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm import reptile
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.registry import learner_class, validate
from meta.config import Config
from meta.config.ppo import SelfPlayConfig
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
    validate(cfg)
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
    env = envs.make(cfg.meta.tasks[0].name)
    fresh = policy_for(env, cfg.network).state_dict()
    env.close()
    if cfg.resume:
        mismatch = weights_mismatch(fresh, resume_state(run_path(cfg, run_id))["theta"])
        if mismatch:
            raise ValueError(
                f"resume=true: {run_path(cfg, run_id) / BEHAVIOR_NAME / LATEST} holds weights "
                f"of another network ({mismatch}); refused"
            )
    if cfg.initialize_from:
        sizes = (int(fresh["actor.0.weight"].shape[1]), int(fresh["log_std"].shape[0]))
        weights = latest_weights(cfg.results_dir, str(cfg.initialize_from), cfg.network, sizes)
        mismatch = weights_mismatch(fresh, weights)
        if mismatch:
            raise ValueError(
                f"initialize_from={cfg.initialize_from}: its weights do not fit this network "
                f"({mismatch})"
            )


def weights_mismatch(expected: Weights, given: Weights) -> str:
    """How `given` differs from `expected` in keys or shapes, in words; empty when it fits."""
    missing, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
    if missing or extra:
        return f"missing {missing[:3]}, unexpected {extra[:3]}"
    for key, value in expected.items():
        if given[key].shape != value.shape:
            return f"{key} has shape {tuple(given[key].shape)}, this network {tuple(value.shape)}"
    return ""


def check_specs(specs: Mapping[str, Mapping[str, BehaviorSpec]]) -> None:
    """ValueError naming a family whose behaviors' specs differ from the first family's.

    Theta is shared by every task, so every behavior of every family must have one spec.
    """
    families = list(specs)
    if not families:
        return
    first, reference = families[0], next(iter(specs[families[0]].values()))
    for family in families:
        for behavior, spec in specs[family].items():
            if spec != reference:
                raise ValueError(
                    f"task {family}: behavior {behavior} has observations "
                    f"{[o.shape for o in spec.observation_specs]} and actions "
                    f"{_actions(spec)}, but {first} has "
                    f"{[o.shape for o in reference.observation_specs]} and "
                    f"{_actions(reference)}: every task must share one spec (theta is shared)"
                )


def _actions(spec: BehaviorSpec) -> str:
    action = spec.action_spec
    return f"continuous {action.continuous_size}, discrete {list(action.discrete_branches)}"


def check_games(families: Sequence[str], self_play: SelfPlayConfig | None) -> None:
    """ValueError for a game of teams without ppo.self_play."""
    games = [name for name in families if envs.family(name).adversarial]
    if games and self_play is None:
        raise ValueError(
            f"task {games[0]} is a game of teams (behaviors Brain?team=0, Brain?team=1) but "
            "ppo.self_play is not set: add it (e.g. ppo=selfplay) to train it with self-play"
        )


def check_families(families: Sequence[str], self_play: SelfPlayConfig | None) -> None:
    """Both checks for the built-in families named (each made once with one area)."""
    check_games(families, self_play)
    specs = {}
    for name in dict.fromkeys(families):
        env = envs.make(name)
        specs[name] = dict(env.behavior_specs)
        env.close()
    check_specs(specs)
