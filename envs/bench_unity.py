"""Agent-steps per second through UnityEnvironment against a build, beside the native task.

``python -m envs.bench_unity [--areas 1 64] [--steps 2000] [--repeat 3]`` prints, per number
of areas: the native backend's rate, the rate through ``UnityEnvironment`` (one build, the
way mlagents-learn drives it) with where a step's time goes on each side, and the unity
backend (worker processes) with the memory each worker costs. Each rate is the best of
``--repeat`` runs (other load on the machine only ever slows a run down).
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from mlagents_envs.base_env import ActionTuple, BaseEnv
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel
from mlagents_envs.timers import get_timer_tree, reset_timers

import envs
from envs.backend.host import free_ports, use_this_interpreter
from envs.backend.unity_env import UnityEnv, resolve_build
from envs.constants import BEHAVIOR_NAME

CLIENT_PHASES = (
    "UnityEnvironment._generate_step_input",
    "communicator.exchange",
    "steps_from_proto",
)


def rate(env: BaseEnv, steps: int, warmup: int = 100) -> float:
    """Agent-steps per second of ``steps`` steps with fixed random actions."""
    env.reset()
    n = len(env.get_steps(BEHAVIOR_NAME)[0])
    move = ActionTuple(
        continuous=np.random.default_rng(0).uniform(-1, 1, (n, 2)).astype(np.float32)
    )
    for _ in range(warmup):
        env.set_actions(BEHAVIOR_NAME, move)
        env.step()
    reset_timers()
    start = time.perf_counter()
    for _ in range(steps):
        env.set_actions(BEHAVIOR_NAME, move)
        env.step()
        env.get_steps(BEHAVIOR_NAME)
    return steps * n / (time.perf_counter() - start)


def native_rate(family: str, areas: int, steps: int) -> tuple[float, str]:
    """Rate of the in-process task."""
    return rate(envs.make(family, num_areas=areas), steps), ""


def best(runs: int, measure: Callable[[], tuple[float, str]]) -> tuple[float, str]:
    """The fastest of ``runs`` measurements, with its notes."""
    return max((measure() for _ in range(runs)), key=lambda result: result[0])


def client_profile(steps: int) -> str:
    """Microseconds per step in UnityEnvironment's timed phases (mlagents_envs timers)."""
    tree = get_timer_tree()["children"]["UnityEnvironment.step"]["children"]
    parts = []
    for name in CLIENT_PHASES:
        total = tree.get(name, {}).get("total", 0.0)
        parts.append(f"{name.split('.')[-1].lstrip('_')} {total / steps * 1e6:.0f}")
    return ", ".join(parts)


def build_phases(folder: Path) -> dict[str, float]:
    """Microseconds per step in each phase of the last build that logged to `folder`."""
    line = re.findall(r"time per step: (.*)", (folder / "Player-0.log").read_text())[-1]
    return {name: float(us) for name, us in re.findall(r"(\w+) (\d+) us", line)}


def own_us(phases: dict[str, float]) -> float:
    """The build's own microseconds per step: every phase but waiting on the trainer."""
    return sum(us for name, us in phases.items() if name != "exchange")


def without_build(areas: int, rate: float, phases: dict[str, float]) -> float:
    """The rate if the build's own work took no time."""
    return areas / (areas / rate - own_us(phases) * 1e-6)


def build_figures(areas: int, rate: float, folder: Path) -> dict[str, Any]:
    """The last build's phases (us/step), their own total, and the rate without them."""
    phases = build_phases(folder)
    bound = without_build(areas, rate, phases)
    return {"build_us": phases, "build_own_us": own_us(phases), "without_build": bound}


def through_unity(family: str, areas: int, steps: int, folder: Path) -> tuple[float, str]:
    """Rate through one UnityEnvironment, and the client- and build-side time per step."""
    use_this_interpreter()
    env = UnityEnvironment(
        file_name=resolve_build(family),
        base_port=free_ports(),
        no_graphics=True,
        num_areas=areas,
        log_folder=str(folder),
        side_channels=[StatsSideChannel()],
    )
    try:
        value = rate(env, steps)
        client = client_profile(steps)
    finally:
        env.close()
    figures = build_figures(areas, value, folder)
    build = ", ".join(f"{name} {us:.0f}" for name, us in figures["build_us"].items())
    return value, (
        f"trainer side (us/step): {client}\n        build side (us/step): {build}\n"
        "        if the build's own work (all but exchange) took no time: "
        f"at most {figures['without_build']:,.0f}"
    )


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def through_backend(
    family: str, areas: int, num_envs: int, steps: int, folder: Path
) -> tuple[float, str]:
    """Rate through the unity backend, and the memory of each worker's two processes."""
    env = UnityEnv(
        family,
        num_envs=num_envs,
        num_areas=areas,
        base_port=free_ports(num_envs),
        log_folder=folder,
    )
    try:
        value = rate(env, steps)
        memory = ", ".join(
            f"worker {rss_mb(w):.0f} MB + build {rss_mb(b):.0f} MB" for w, b in env.pids
        )
    finally:
        env.close()
    return value, f"RSS per worker: {memory}"


def main(argv: list[str] | None = None) -> None:
    """Print the benchmark table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    one_behavior = sorted(n for n, f in envs.FAMILIES.items() if not f.adversarial)
    parser.add_argument("--family", default="FindTarget", choices=one_behavior)
    parser.add_argument("--areas", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bench-unity-"))
    print(f"{args.family}: agent-steps/s, best of {args.repeat} runs of {args.steps} steps")
    for areas in args.areas:
        native = best(args.repeat, partial(native_rate, args.family, areas, args.steps))[0]
        print(f"{areas:>4} areas  native backend            {native:>10,.0f}")
        value, notes = best(
            args.repeat, partial(through_unity, args.family, areas, args.steps, folder)
        )
        print(f"{areas:>4} areas  UnityEnvironment + build  {value:>10,.0f}\n        {notes}")
        for num_envs in args.num_envs:
            value, notes = best(
                args.repeat,
                partial(through_backend, args.family, areas, num_envs, args.steps, folder),
            )
            label = f"unity backend, {num_envs} worker" + ("s" if num_envs > 1 else " ")
            print(f"{areas:>4} areas  {label}  {value:>10,.0f}   {notes}")


if __name__ == "__main__":
    main()
