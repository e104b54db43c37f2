"""Checks before a run: every family's specs equal, and games only with self-play settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mlagents_envs.base_env import BehaviorSpec

from meta.algorithm.selfplay.config import SelfPlayConfig


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
    import envs

    games = [name for name in families if envs.family(name).adversarial]
    if games and self_play is None:
        raise ValueError(
            f"task {games[0]} is a game of teams (behaviors Brain?team=0, Brain?team=1) but "
            "ppo.self_play is not set: add it (e.g. ppo=selfplay) to train it with self-play"
        )


def check_families(families: Sequence[str], self_play: SelfPlayConfig | None) -> None:
    """Both checks for the built-in families named (each made once with one area)."""
    import envs

    check_games(families, self_play)
    specs = {}
    for name in dict.fromkeys(families):
        env = envs.make(name)
        specs[name] = dict(env.behavior_specs)
        env.close()
    check_specs(specs)
