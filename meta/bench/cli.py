"""meta-bench: our inner PPO beside SB3's, env throughput, outer-loop overhead, GEMM limits.

Everything runs in this one process, one part after the other. Both PPO implementations get
the same torch thread count for each row (`--threads`). Ours collects on one thread at batch
64 (`SERIAL_BATCH` in meta.algorithm.ppo.rollout) and, given two threads, runs the actor's and
the critic's halves of each update step side by side (meta.algorithm.ppo.update). Rates are the
best of `--repeats` timed runs after a warm-up training, since other load only ever slows a
run down."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

import envs
from envs.bench import throughput
from meta.algorithm.ppo.rollout import SERIAL_BATCH
from meta.bench import limit as bench_limit
from meta.bench import markup
from meta.bench import report as bench_report
from meta.bench import scaling as bench_scaling
from meta.bench.sb3 import Outcome, Settings, missing_extra, train_ours, train_sb3
from meta.config import CheckpointConfig
from meta.config.ppo import PPOConfig
from meta.config.runtime import MATMUL_PRECISIONS
from meta.observe.machine import cpu_blocks, cpu_kind, cpu_model
from meta.process.atomic import atomic_write_text
from meta.process.compute import matmul_precision, torch_threads

WARMUP_STEPS = 10_240
DOCS_PAGE = "docs/reference/benchmarks.md"
"""The manual's page whose figures `--readme` rewrites."""


def machine() -> dict[str, Any]:
    """CPU model, cores and library versions of this machine."""
    import numpy as np
    import stable_baselines3

    cpus = cpu_blocks()
    cores = {(c.get("physical id"), c.get("core id")) for c in cpus}
    return {
        "cpu": cpu_model(cpus),
        "cpu_kind": cpu_kind(cpus),
        "logical_cpus": os.cpu_count(),
        "cores": len(cores) if cpus else None,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "python": sys.version.split()[0],
    }


def _best(runs: list[Outcome]) -> Outcome:
    return min(runs, key=lambda o: o.seconds)


def side_by_side(settings: Settings, threads: list[int], repeats: int) -> list[dict[str, Any]]:
    """Per thread count: both trainings (best of `repeats`) and the ratio of their rates."""
    warm = replace(settings, budget=WARMUP_STEPS, eval_episodes=64)
    rows = []
    for n in threads:
        with torch_threads(n):
            train_ours(warm)
            train_sb3(warm)
            ours = _best([train_ours(settings) for _ in range(repeats)])
            sb3 = _best([train_sb3(settings) for _ in range(repeats)])
        rows.append(
            {
                "threads": n,
                "ours": _outcome(ours),
                "sb3": _outcome(sb3),
                "ratio": ours.rate / sb3.rate,
            }
        )
    return rows


def _outcome(o: Outcome) -> dict[str, float]:
    return {**asdict(o), "rate": o.rate}


def phases(settings: Settings, threads: list[int]) -> list[dict[str, Any]]:
    """Collection and update alone: on 1 thread, on 2 intra-op threads, and as ours uses 2."""
    configs = [("1 thread", 1, 1, False)]
    if 2 in threads:
        configs += [
            ("2 intra-op threads", 2, 2, False),
            ("ours with 2: collection on 1, update halves side by side", 1, 1, True),
        ]
    rows = []
    for name, collect, update, halves in configs:
        rates = bench_limit.phase_rates(
            settings.task,
            settings.num_areas,
            settings.network,
            settings.ppo,
            collect,
            update,
            halves,
        )
        rows.append({"mode": name, "collect_threads": collect, **rates})
    return rows


def default_inner(threads: list[int], repeats: int) -> list[dict[str, Any]]:
    """One inner training as meta-train runs it (PPOConfig defaults: 20,480 steps), per threads."""
    settings = Settings(budget=PPOConfig().max_steps, eval_episodes=64)
    rows = []
    for n in threads:
        with torch_threads(n):
            best = _best([train_ours(settings) for _ in range(repeats + 1)])
        rows.append({"threads": n, "rate": best.rate, "seconds": best.seconds})
    return rows


def env_rates(quick: bool) -> list[dict[str, Any]]:
    """Raw BaseEnv step throughput of the native tasks (envs.bench)."""
    agent_steps, cap = (200_000, 20_000) if quick else (1_000_000, 100_000)
    steps = {n: min(max(agent_steps // n, 500), cap) for n in (1, 64, 1024)}
    return [
        {"task": name, "areas": n, "rate": throughput(name, n, count)}
        for name in envs.FAMILIES
        for n, count in steps.items()
    ]


def unity_rates(quick: bool) -> dict[str, Any]:
    """The protocol backend through envs.bench_unity, or why it could not run."""
    try:
        from envs import bench_unity as bu

        steps, rows = (300 if quick else 2000), []
        with tempfile.TemporaryDirectory() as temporary:
            folder = Path(temporary)
            for areas in (1, 64):
                rate, _ = bu.through_unity("FindTarget", areas, steps, folder)
                row = {"areas": areas, "rate": rate, **bu.build_figures(areas, rate, folder)}
                rows.append({"path": "UnityEnvironment + build", **row})
                rate, _ = bu.through_backend("FindTarget", areas, 1, steps, folder)
                rows.append({"path": "unity backend, 1 worker", "areas": areas, "rate": rate})
        return {"available": True, "rows": rows}
    except Exception as error:  # an optional part: any failure is reported, not raised
        return {"available": False, "reason": f"{type(error).__name__}: {error}"}


def outer_overhead(meta_steps: int = CheckpointConfig().checkpoint_interval) -> dict[str, Any]:
    """Seconds per meta-step outside the inner trainings (default: one checkpoint interval)."""
    from meta.config import Config, LoggerConfig, MetaConfig
    from meta.trainer import train as meta_train

    with tempfile.TemporaryDirectory() as folder:
        for run_id, steps in (("warmup", 1), ("bench", meta_steps)):
            cfg = Config(
                run_id=run_id,
                results_dir=folder,
                meta=MetaConfig(steps=steps),
                ppo=PPOConfig(max_steps=10_240),
                logger=LoggerConfig(console=False),
                torch_matmul_precision=torch.get_float32_matmul_precision(),
            )
            run_dir = meta_train(cfg, run_id)
        timers = json.loads((run_dir / "run_logs" / "timers.json").read_text())
    return bench_report.outer_breakdown(timers)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """All parts of the benchmark, as one JSON-ready dict."""
    settings = Settings(budget=args.steps, seed=args.seed, eval_episodes=args.eval_episodes)
    report: dict[str, Any] = {
        "command": "meta-bench " + shlex.join(args.argv),
        "machine": machine(),
        "load_before": os.getloadavg(),
        "settings": {
            **asdict(settings),
            "n_steps": settings.n_steps,
            "threads": args.threads,
            "repeats": args.repeats,
            "serial_batch": SERIAL_BATCH,
            "matmul_precision": args.matmul_precision,
        },
    }
    report["training"] = side_by_side(settings, args.threads, args.repeats)
    report["default_inner"] = default_inner(args.threads, args.repeats)
    report["phases"] = phases(settings, args.threads)
    report["limit"] = bench_limit.limits(
        10, 2, settings.network, settings.ppo, settings.num_areas, tuple(args.threads)
    )
    with torch_threads(1):  # meta-train's default (torch_threads=1)
        report["env"] = env_rates(args.quick)
        report["unity"] = unity_rates(args.quick)
        report["outer"] = outer_overhead(3) if args.quick else outer_overhead()
    report["scaling"] = bench_scaling.scaling(args.quick)
    report["load_after"] = os.getloadavg()
    bench_report.summarise(report)
    return report


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="meta-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k-step trainings, fewer repeats")
    parser.add_argument("--steps", type=int, help="agent-steps per training (300k; quick 100k)")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        help="torch thread counts to compare at, the same for both (1 2; quick 1)",
    )
    parser.add_argument("--repeats", type=int, help="timed runs per training (2; quick 1)")
    parser.add_argument(
        "--matmul-precision",
        choices=MATMUL_PRECISIONS,
        default="highest",
        help="torch.set_float32_matmul_precision for everything measured, ours and SB3's "
        "(highest; torch_matmul_precision of meta-train)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=1024)
    parser.add_argument("--out", default="results/bench.json", help="JSON report")
    parser.add_argument("--markdown", help="also write the report as markdown here")
    parser.add_argument(
        "--readme",
        nargs="?",
        const=DOCS_PAGE,
        metavar="PAGE",
        help=f"also replace the figures between the meta-bench markers of this page "
        f"(default {DOCS_PAGE})",
    )
    args = parser.parse_args(argv)
    args.argv = argv
    args.steps = args.steps or (100_000 if args.quick else 300_000)
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.threads = args.threads or ([1] if args.quick else [1, 2])
    return args


def check_page(page: Path) -> None:
    """Exit 2 with one line unless `page` exists and has the meta-bench markers."""
    try:
        markup.splice(page.read_text(), "")
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) else error
        print(f"meta-bench: error: --readme {page}: {reason}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    """meta-bench [--quick] [--out bench.json] [--markdown FILE] [--readme [PAGE]]."""
    args = parse(argv)
    missing = missing_extra()
    if missing is not None:
        print(
            f"meta-bench: error: {missing} is not installed; meta-bench needs the bench extra: "
            "pip install -e '.[bench]'",
            file=sys.stderr,
        )
        raise SystemExit(1)
    if args.readme:
        check_page(Path(args.readme))  # fail before a long run
    with matmul_precision(args.matmul_precision):
        report = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(bench_report.text(report))
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(bench_report.markdown(report))
    if args.readme:
        readme = Path(args.readme)
        atomic_write_text(readme, markup.splice(readme.read_text(), bench_report.markdown(report)))
    written = [str(p) for p in (out, args.markdown, args.readme) if p]
    print(f"meta-bench: wrote {', '.join(written)}")


if __name__ == "__main__":
    main()
