"""How the cost grows: one inner training against areas and width, meta-steps against the batch.

Every row runs on one torch thread (meta-train's default) and is set beside the GEMM-only
limit of its own shapes (meta.bench.limit), so a falling share says where overhead, not
arithmetic, takes over.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from meta.bench import limit as bench_limit
from meta.bench.sb3 import Settings, train_ours
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.process.compute import torch_threads

AREAS = (16, 64, 256, 1024)
HIDDEN_UNITS = (64, 128, 256, 512)
META_BATCH_SIZES = (1, 4, 16)
STACKS = (1, 4, 16, 64)
STACK_HIDDEN_UNITS = (64, 128)
COMPILED = (False, True)
"""The meta-batch table's columns: its trainings stacked, and stacked with runtime.compile."""
OBS_SIZE, ACTION_SIZE = 10, 2
"""The built-in families' observation and action sizes."""


def _limit(network: NetworkConfig, ppo: PPOConfig, areas: int, repeats: int) -> float:
    """GEMM-only agent-steps/s of these shapes on one thread."""
    limit = bench_limit.limits(OBS_SIZE, ACTION_SIZE, network, ppo, areas, (1,), repeats)
    return bench_limit.limit_rate(limit, 1, 1)


def inner_rate(settings: Settings, repeats: int, limit_repeats: int) -> dict[str, Any]:
    """One inner training's agent-steps/s (best of `repeats`) beside its GEMM limit."""
    train_ours(replace(settings, budget=settings.ppo.buffer_size))  # warm up these shapes
    rate = max(train_ours(settings).rate for _ in range(repeats))
    bound = _limit(settings.network, settings.ppo, settings.num_areas, limit_repeats)
    return {
        "areas": settings.num_areas,
        "hidden_units": settings.network.hidden_units,
        "rate": rate,
        "limit_rate": bound,
        "fraction": rate / bound,
    }


def meta_step_rate(
    meta_batch_size: int,
    meta_steps: int,
    folder: Path,
    limit_repeats: int,
    compiled: bool = False,
) -> dict[str, Any]:
    """Meta-steps per minute of an in-process meta-train run, beside its GEMM limit
    (`compiled`: runtime.compile)."""
    from meta.config import Config, LoggerConfig, MetaConfig, RuntimeConfig
    from meta.trainer import train as meta_train

    ppo = PPOConfig()
    cfg = Config(
        run_id=f"local-{meta_batch_size}{'-compiled' * compiled}",
        results_dir=str(folder),
        meta=MetaConfig(steps=meta_steps, meta_batch_size=meta_batch_size),
        ppo=ppo,
        runtime=RuntimeConfig(compile=compiled),
        logger=LoggerConfig(console=False, tensorboard=False),
        torch_matmul_precision=torch.get_float32_matmul_precision(),  # meta-bench's
    )
    run_dir = meta_train(cfg, cfg.run_id)
    step = json.loads((run_dir / "run_logs" / "timers.json").read_text())["children"]
    seconds = step["meta_step"]["total"] / step["meta_step"]["count"]
    bound = _limit(cfg.network, ppo, cfg.env.num_areas, limit_repeats)
    limit_seconds = meta_batch_size * ppo.max_steps / bound
    return {
        "meta_batch_size": meta_batch_size,
        "compiled": compiled,
        "per_minute": 60.0 / seconds,
        "limit_per_minute": 60.0 / limit_seconds,
        "fraction": limit_seconds / seconds,
    }


def scaling(quick: bool) -> dict[str, Any]:
    """The three scaling tables, measured on one torch thread."""
    repeats, limit_repeats = (1, 20) if quick else (2, 50)
    base = Settings(budget=PPOConfig().max_steps, eval_episodes=16)
    with torch_threads(1), tempfile.TemporaryDirectory() as folder:
        areas = [inner_rate(replace(base, num_areas=n), repeats, limit_repeats) for n in AREAS]
        hidden = [
            inner_rate(replace(base, network=NetworkConfig(hidden_units=h)), repeats, limit_repeats)
            for h in HIDDEN_UNITS
        ]
        meta_step_rate(1, 1, Path(folder) / "warm", limit_repeats)  # imports, first env
        steps, batches, stacks = 2 if quick else 3, [], []
        for k in META_BATCH_SIZES:
            for compiled in COMPILED:
                if compiled and k == 1:
                    continue  # compiled where trainings stack
                if compiled:  # its shapes compiled, untimed
                    meta_step_rate(k, 1, Path(folder) / "warm", 1, compiled)
                bench = Path(folder) / "bench"
                batches.append(meta_step_rate(k, steps, bench, limit_repeats, compiled))
        for h in STACK_HIDDEN_UNITS:
            for k in STACKS[:-1] if quick else STACKS:
                stacks.append(stacked_rate(k, h, limit_repeats))
                if k > 1:
                    stacked_rate(k, h, 1, compiled=True)  # its shapes compiled, untimed
                    stacks.append(stacked_rate(k, h, limit_repeats, compiled=True))
    return {"areas": areas, "hidden_units": hidden, "meta_batch_size": batches, "stacks": stacks}


def stacked_rate(k: int, hidden: int, limit_repeats: int, compiled: bool = False) -> dict[str, Any]:
    """Aggregate agent-steps/s of k default inner trainings stacked, beside k GEMM limits
    (`compiled`: runtime.compile)."""
    import time

    from meta.algorithm.ppo.network import policy_for
    from meta.algorithm.ppo.weights import cpu_weights
    from meta.algorithm.request import Task, TrainRequest
    from meta.algorithm.training import train_requests
    from meta.config import EnvConfig
    from meta.runtime.envpool import EnvPool

    ppo, network, env = PPOConfig(), NetworkConfig(hidden_units=hidden), EnvConfig()
    pool = EnvPool(env)
    theta = cpu_weights(policy_for(pool.env("FindTarget", {}, 0), network))
    families = ("FindTarget", "CarryObject")
    requests = [
        TrainRequest((Task(families[i % 2], {}),), theta, i, ppo, network) for i in range(k)
    ]
    envs = [pool.env(r.tasks[0].family, {}, r.seed) for r in requests]
    started = time.perf_counter()
    results = train_requests(requests, envs, compiled=compiled)
    seconds = time.perf_counter() - started
    steps = sum(r.stats["steps"] for r in results)
    # the stacked products do the FLOPs of k trainings' products: k trainings' limit
    bound = _limit(network, ppo, env.num_areas, limit_repeats)
    return {
        "trainings": k,
        "hidden_units": hidden,
        "compiled": compiled,
        "rate": steps / seconds,
        "limit_rate": bound,
        "fraction": steps / seconds / bound,
    }


def _share(row: dict[str, Any]) -> str:
    return f"{row['fraction']:.0%}"


def tables(scaled: dict[str, Any]) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    """The scaling tables, titled, as (headers, rows)."""
    inner = ["agent-steps/s", "GEMM-only agent-steps/s", "share of limit"]

    def rows(key: str) -> list[list[str]]:
        return [
            [str(r[key]), f"{r['rate']:,.0f}", f"{r['limit_rate']:,.0f}", _share(r)]
            for r in scaled[key]
        ]

    by = {(r["meta_batch_size"], bool(r.get("compiled"))): r for r in scaled["meta_batch_size"]}

    def per_minute(size: int, compiled: bool) -> str:
        return f"{by[size, compiled]['per_minute']:.1f}" if (size, compiled) in by else "-"

    batches = [
        [
            str(size),
            per_minute(size, False),
            per_minute(size, True),
            f"{by[size, False]['limit_per_minute']:.1f}",
            _share(by[size, False]),
        ]
        for size in sorted({size for size, _ in by})
    ]
    runs = scaled.get("stacks", [])
    compiled = {(r["trainings"], r["hidden_units"]): r for r in runs if r.get("compiled")}
    stacks = []
    for r in (r for r in runs if not r.get("compiled")):
        c = compiled.get((r["trainings"], r["hidden_units"]))
        stacks.append(
            [
                str(r["trainings"]),
                str(r["hidden_units"]),
                f"{r['rate']:,.0f}",
                f"{c['rate']:,.0f}" if c else "-",
                f"{r['limit_rate']:,.0f}",
                _share(r),
                _share(c) if c else "-",
            ]
        )
    return [
        (
            "Scaling: one inner training against env.num_areas (128 hidden units, 1 thread)",
            (["env.num_areas", *inner], rows("areas")),
        ),
        (
            "Scaling: one inner training against network.hidden_units (64 areas, 1 thread)",
            (["network.hidden_units", *inner], rows("hidden_units")),
        ),
        (
            "Scaling: default meta-steps against meta.meta_batch_size (in-process, 1 thread)",
            (
                [
                    "meta.meta_batch_size",
                    "meta-steps/min",
                    "compiled",
                    "GEMM-only meta-steps/min",
                    "share",
                ],
                batches,
            ),
        ),
        (
            "Stacked: k default inner trainings at once (one stack, 1 thread)",
            (
                [
                    "trainings",
                    "hidden units",
                    "agent-steps/s",
                    "compiled",
                    "GEMM-only agent-steps/s",
                    "share",
                    "compiled share",
                ],
                stacks,
            ),
        ),
    ]
