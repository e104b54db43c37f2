"""meta-bench's report: derived figures, and the same tables as plain text or markdown."""

from __future__ import annotations

from typing import Any

from meta.bench import scaling
from meta.bench.limit import limit_rate
from meta.bench.markup import Table, md_table, text_table

TARGET_RATIO = 2.0


def outer_breakdown(timers: dict[str, Any]) -> dict[str, Any]:
    """Per meta-step seconds outside the inner training, by timer, from a timers.json tree."""
    step = timers["children"]["meta_step"]
    count = step["count"]
    outside = {n: c for n, c in step.get("children", {}).items() if n != "inner_training"}
    inner = step.get("children", {}).get("inner_training", {}).get("total", 0.0)
    overhead = (step["total"] - inner) / count
    parts: dict[str, float] = {}
    for name, node in outside.items():
        parts[name] = node["total"] / count
        for child, sub in node.get("children", {}).items():
            parts[f"{name}: {child}"] = sub["total"] / count
    parts["other (env creation, rows)"] = (
        overhead - sum(n["total"] for n in outside.values()) / count
    )
    return {
        "meta_steps": count,
        "overhead_s": overhead,
        "inner_training_s": inner / count,
        "parts_s": parts,
    }


def summarise(report: dict[str, Any]) -> None:
    """Add the headline (each side at its best thread count) and the share of the GEMM limit."""
    rows, limit = report["training"], report["limit"]
    serial = report["settings"]["num_areas"] <= report["settings"]["serial_batch"]
    limit["achieved"] = {}
    for row in rows:
        n = row["threads"]
        bound = limit_rate(limit, 1 if serial else n, n)
        limit["achieved"][str(n)] = {
            "limit_rate": bound,
            "fraction": row["ours"]["rate"] / bound,
            "gflops": row["ours"]["rate"] * limit["flop"]["total"] / 1e9,
        }
    ours = max(rows, key=lambda r: r["ours"]["rate"])
    sb3 = max(rows, key=lambda r: r["sb3"]["rate"])
    report["best"] = {
        "ours": {"threads": ours["threads"], **ours["ours"]},
        "sb3": {"threads": sb3["threads"], **sb3["sb3"]},
        "ratio": ours["ours"]["rate"] / sb3["sb3"]["rate"],
    }


def _k(rate: float) -> str:
    return f"{rate:,.0f}"


def _training(report: dict[str, Any]) -> Table:
    return (
        ["threads", "ours steps/s", "SB3 steps/s", "ratio", "ours success", "SB3 success"],
        [
            [
                str(r["threads"]),
                _k(r["ours"]["rate"]),
                _k(r["sb3"]["rate"]),
                f"{r['ratio']:.2f}x",
                f"{r['ours']['success']:.3f}",
                f"{r['sb3']['success']:.3f}",
            ]
            for r in report["training"]
        ],
    )


def _headline(report: dict[str, Any]) -> Table:
    best = report["best"]
    rows = [
        [name, _k(b["rate"]), str(b["threads"]), f"{b['success']:.3f}"]
        for name, b in (("ours", best["ours"]), ("SB3", best["sb3"]))
    ]
    return ["", "steps/s", "threads", "success"], [
        *rows,
        ["ratio", f"{best['ratio']:.2f}x", "", ""],
    ]


def _inner(report: dict[str, Any]) -> Table:
    return (
        ["threads", "agent-steps/s", "seconds"],
        [
            [str(r["threads"]), _k(r["rate"]), f"{r['seconds']:.3f}"]
            for r in report["default_inner"]
        ],
    )


def _phases(report: dict[str, Any]) -> Table:
    return (
        ["torch threads", "collection steps/s", "update steps/s"],
        [[p["mode"], _k(p["collect"]), _k(p["update"])] for p in report["phases"]],
    )


def _work(report: dict[str, Any]) -> Table:
    flop = report["limit"]["flop"]
    return (
        ["FLOP per agent-step (matrix products)", "FLOP"],
        [
            ["collection: actor + critic forward", _k(flop["collect"])],
            [f"update: {flop['num_epoch']} x (forward + backward)", _k(flop["update"])],
            ["total", _k(flop["total"])],
        ],
    )


def _limit(report: dict[str, Any]) -> Table:
    s, limit = report["settings"], report["limit"]
    rates = {str(r["threads"]): r["ours"]["rate"] for r in report["training"]}
    return (
        [
            "threads",
            f"GEMM GFLOP/s at batch {s['num_areas']}",
            f"GEMM GFLOP/s at batch {s['ppo']['batch_size']}",
            "GEMM-only steps/s",
            "ours steps/s",
            "ours GFLOP/s",
            "share of limit",
        ],
        [
            [
                n,
                f"{t['gflops_collect_batch']:.1f}",
                f"{t['gflops_update_batch']:.1f}",
                _k(limit["achieved"][n]["limit_rate"]),
                _k(rates[n]),
                f"{limit['achieved'][n]['gflops']:.1f}",
                f"{limit['achieved'][n]['fraction']:.0%}",
            ]
            for n, t in limit["threads"].items()
            if n in limit["achieved"]
        ],
    )


def _env(report: dict[str, Any]) -> Table:
    return (
        ["task", "areas", "agent-steps/s"],
        [[e["task"], str(e["areas"]), _k(e["rate"])] for e in report["env"]],
    )


NO_BUILD = "with a build taking no time"
"""The rate the trainer side and the transport alone allow (envs.bench_unity.without_build)."""


def _unity(report: dict[str, Any]) -> Table:
    unity = report["unity"]
    if not unity["available"]:
        return ["protocol backend", "reason"], [["not available", unity["reason"][:100]]]
    rows = []
    for u in unity["rows"]:
        extra = [f"{u['build_own_us']:.0f}", _k(u["without_build"])] if "build_us" in u else []
        rows.append([u["path"], str(u["areas"]), _k(u["rate"]), *(extra or ["", ""])])
    return ["path", "areas", "agent-steps/s", "build's own us/step", NO_BUILD], rows


def _outer(report: dict[str, Any]) -> Table:
    outer = report["outer"]
    rows = [[name, f"{seconds * 1e3:.1f}"] for name, seconds in outer["parts_s"].items()]
    rows += [
        ["total outside the inner training", f"{outer['overhead_s'] * 1e3:.1f}"],
        ["inner training (10,240 agent-steps)", f"{outer['inner_training_s'] * 1e3:.1f}"],
    ]
    return ["part", "ms per meta-step"], rows


def tables(report: dict[str, Any]) -> list[tuple[str, Table]]:
    """Every table of the report, titled."""
    return [
        (
            "Inner PPO vs Stable-Baselines3, same settings, per torch thread count",
            _training(report),
        ),
        ("Each at its best thread count", _headline(report)),
        ("One default inner training (PPOConfig defaults, 20,480 agent-steps)", _inner(report)),
        ("Our phases alone (best buffer of 3)", _phases(report)),
        ("Floating-point work", _work(report)),
        ("Against the GEMM limit", _limit(report)),
        ("Native task throughput (BaseEnv API, random actions)", _env(report)),
        ("Protocol backend (envs.bench_unity, FindTarget)", _unity(report)),
        (
            f"Outer-loop overhead (mean of {report['outer']['meta_steps']} meta-steps)",
            _outer(report),
        ),
        *(scaling.tables(report["scaling"]) if "scaling" in report else []),
    ]


def reading(report: dict[str, Any]) -> list[str]:
    """The headline figures as sentences, computed from the report."""
    best, limit = report["best"], report["limit"]
    n = str(best["ours"]["threads"])
    bound = limit["achieved"][n]["limit_rate"]
    target = TARGET_RATIO * best["sb3"]["rate"]
    outer = report["outer"]["overhead_s"]
    inner = min(r["seconds"] for r in report["default_inner"] if r["threads"] == 1)
    return [
        f"Ours trains at {_k(best['ours']['rate'])} agent-steps/s ({n} torch "
        f"thread{'' if n == '1' else 's'}), SB3 at {_k(best['sb3']['rate'])} "
        f"({best['sb3']['threads']}): {best['ratio']:.2f}x, with final "
        f"success {best['ours']['success']:.3f} against {best['sb3']['success']:.3f}.",
        f"At {_k(limit['flop']['total'])} FLOP per agent-step that is "
        f"{limit['achieved'][n]['gflops']:.0f} GFLOP/s, {limit['achieved'][n]['fraction']:.0%} of "
        f"the {_k(bound)} agent-steps/s that the matrix products alone would allow at the speed "
        f"torch reaches for their shapes here.",
        f"{TARGET_RATIO:g}x SB3 would be {_k(target)} agent-steps/s: {target / bound:.0%} of that "
        f"GEMM-only limit, before any activation, loss, optimiser or environment work.",
        f"Outside its inner trainings a meta-step costs {outer * 1e3:.1f} ms, "
        f"{outer / (outer + inner):.1%} of a meta-step with one default inner training "
        f"({inner:.3f} s on one thread).",
    ]


def _settings_line(report: dict[str, Any]) -> str:
    s, p, net = report["settings"], report["settings"]["ppo"], report["settings"]["network"]
    return (
        f"{s['task']}, {s['num_areas']} areas, {s['budget']:,} agent-steps per training; "
        f"buffer {p['buffer_size']} (n_steps {s['n_steps']}), minibatch {p['batch_size']}, "
        f"{p['num_epoch']} epochs, learning rate {p['learning_rate']:g} and clip "
        f"{p['epsilon']:g} decaying linearly (SB3 through schedules), entropy {p['beta']:g} "
        f"(ours decays it, SB3 cannot), gamma {p['gamma']:g}, lambda {p['lambd']:g}; "
        f"{net['num_layers']}x{net['hidden_units']} SiLU, separate actor and critic, "
        f"observations normalised (SB3: VecNormalize). Torch threads: both set to the row's "
        f"count; ours collects on one (batches up to {s['serial_batch']} agents) and, given "
        f"two, runs the actor's and the critic's halves of each update step side by side, one "
        f"thread each. Float32 matrix products at torch's "
        f"`{s.get('matmul_precision', 'highest')}` precision, for both. "
        f"Rates: best of {s['repeats']} timed runs after a warm-up. Success: share of "
        f"{s['eval_episodes']} fresh episodes won by the final deterministic policy, "
        f"the same episodes for both"
    )


def _machine_line(report: dict[str, Any]) -> str:
    m = report["machine"]
    load = ", ".join(f"{x:.2f}" for x in report["load_before"])
    return (
        f"{m['cpu']} ({m['cpu_kind']}), {m['logical_cpus']} logical CPUs on {m['cores']} "
        f"cores; torch {m['torch']}, numpy {m['numpy']}, stable-baselines3 "
        f"{m['stable_baselines3']}, Python {m['python']}; "
        f"load average before the run {load} (other processes slow runs down, most of all "
        f"multi-threaded ones)"
    )


def text(report: dict[str, Any]) -> str:
    """The report as plain-text tables."""
    parts = [f"machine: {_machine_line(report)}", f"settings: {_settings_line(report)}"]
    parts += [f"\n{title}\n{text_table(table)}" for title, table in tables(report)]
    return "\n".join([*parts, "", *reading(report)])


def markdown(report: dict[str, Any]) -> str:
    """The report as a markdown section (generated by the command it names)."""
    parts = [
        "## Figures of the last run",
        "",
        f"Generated by `{report['command']}`; do not edit by hand.",
        "",
        f"Machine: {_machine_line(report)}.",
        "",
        f"Settings: {_settings_line(report)}.",
        "",
        " ".join(reading(report)),
        "",
    ]
    for title, table in tables(report):
        parts += [f"### {title}", "", md_table(table), ""]
    return "\n".join(parts)
