"""Throughput of the built-in tasks through the BaseEnv API: `python -m envs.bench`."""

from __future__ import annotations

import argparse
import time

import numpy as np
from mlagents_envs.base_env import ActionTuple

import envs

AREAS = (1, 64, 1024)
BANK = 16


def _run(name: str, num_areas: int, steps: int, seed: int = 0) -> float:
    """Seconds for `steps` set_actions/step/get_steps rounds with random actions.

    A game of teams gets actions for, and is read for, both of its behaviors every round.
    """
    env = envs.make(name, num_areas=num_areas, seed=seed)
    rng = np.random.default_rng(seed)
    bank = [
        ActionTuple(continuous=rng.uniform(-1, 1, (num_areas, 2)).astype(np.float32))
        for _ in range(BANK)
    ]
    behaviors = list(env.behavior_specs)
    start = time.perf_counter()
    for i in range(steps):
        for behavior in behaviors:
            env.set_actions(behavior, bank[i % BANK])
        env.step()
        for behavior in behaviors:
            env.get_steps(behavior)
    elapsed = time.perf_counter() - start
    env.close()
    return elapsed


def throughput(name: str, num_areas: int, steps: int) -> float:
    """Agent-steps per second of task `name` with `num_areas` areas (all teams' agents)."""
    return envs.family(name).teams * num_areas * steps / _run(name, num_areas, steps)


def step_time_us(name: str, steps: int = 20_000) -> float:
    """Microseconds per step (set_actions, step, get_steps) of a one-area environment."""
    return _run(name, 1, steps) / steps * 1e6


def main(argv: list[str] | None = None) -> None:
    """Print agent-steps/s per task and area count, and µs per step at one area."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--agent-steps",
        type=int,
        default=1_000_000,
        help="agent-steps per measurement (2,000 to 50,000 steps each)",
    )
    args = parser.parse_args(argv)
    print(f"{'task':<12} {'areas':>6} {'agent-steps/s':>14}")
    for name in envs.FAMILIES:
        for n in AREAS:
            rate = throughput(name, n, min(max(args.agent_steps // n, 2000), 50_000))
            print(f"{name:<12} {n:>6} {rate:>14,.0f}")
    for name in envs.FAMILIES:
        print(f"{name:<12} µs/step at 1 area: {step_time_us(name):.1f}")


if __name__ == "__main__":
    main()
