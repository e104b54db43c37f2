"""`python experiments/start_actions.py RUN_DIR [...]`: how each start acts before adapting.

For the run's meta-learned weights, each joint baseline in RUN_DIR/eval/ and a fresh policy,
drives 64 areas of one hidden-goal FindTarget task (the positive controls' setting) for 200
steps with the deterministic policy and prints the action log std and the magnitude of the
action means: the share of components beyond the ±1 the task clips actions to shows a start
that drives to an edge whatever the goal.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple
from omegaconf import OmegaConf

import envs
from meta.algorithm.ppo.network import policy_for
from meta.config import NetworkConfig
from meta.evaluation.episodes import policy_actor

TASK = {"hidden_goal": 1, "motor_rotation": 0, "agent_speed": 0.2}


def starts(run_dir: Path) -> dict[str, Path | None]:
    """The run's weights, its joint baselines' and None (a fresh policy)."""
    found: dict[str, Path | None] = {"meta-learned": run_dir / "Brain.pt"}
    for brain in sorted(run_dir.glob("eval/joint*/Brain.pt")):
        found[brain.parent.name] = brain
    return {**found, "fresh": None}


def describe(run_dir: Path, steps: int = 200) -> None:
    """Print one line per start of `run_dir`."""
    saved = OmegaConf.load(run_dir / "configuration.yaml")
    network = NetworkConfig(**OmegaConf.to_container(saved.network))  # type: ignore[arg-type]
    for name, brain in starts(run_dir).items():
        env = envs.make("FindTarget", num_areas=64, seed=3, **TASK)
        env.reset()
        behavior = next(iter(env.behavior_specs))
        policy = policy_for(env, network, seed=0)
        if brain is not None:
            policy.load_state_dict(torch.load(brain, weights_only=True))
        means = []
        for _ in range(steps):
            obs = env.get_steps(behavior)[0].obs[0]
            mean = policy_actor(policy, True, torch.Generator())(obs)
            means.append(np.abs(mean))
            env.set_actions(behavior, ActionTuple(continuous=mean.astype(np.float32)))
            env.step()
        size = np.concatenate(means)
        log_std = ", ".join(f"{v:.2f}" for v in policy.log_std.detach().tolist())
        print(
            f"{run_dir.name:<28} {name:<34} log_std [{log_std}]  |mean| median "
            f"{np.median(size):.2f}  beyond ±1 {np.mean(size > 1):.0%}"
        )


def main() -> None:
    """Describe every run directory given."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dirs", type=Path, nargs="+")
    for run_dir in parser.parse_args().run_dirs:
        describe(run_dir)


if __name__ == "__main__":
    main()
