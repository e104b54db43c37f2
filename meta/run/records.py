"""What a meta-step records: meta_steps.csv rows, per-update rows and the scalars of writers."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from meta.algorithm.ppo.hyper import Hyper
from meta.algorithm.ppo.train import STEPS
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.reptile import distance
from meta.algorithm.request import Task, TrainResult
from meta.algorithm.selfplay.ghost import SUMMARIES
from meta.algorithm.selfplay.summaries import DECISIVE_STAT
from meta.observe.tags import (
    APPROX_KL,
    BETA,
    CLIP_FRACTION,
    CUMULATIVE_REWARD,
    ELO,
    ENTROPY,
    EPISODE_LENGTH,
    EPSILON,
    EXPLAINED_VARIANCE,
    LEARNING_RATE,
    LESSON,
    OUTER_LR,
    POLICY_LOSS,
    SUCCESS,
    SUCCESS_RATE,
    VALUE_LOSS,
    WEIGHT_DELTA_NORM,
)

LESSON_PREFIX = "lesson/"
JOURNAL = "journal"
"""Where a checkpoint carries its meta-step's table rows, to restore any that a kill lost."""
UPDATE_KEYS = (
    POLICY_LOSS,
    VALUE_LOSS,
    ENTROPY,
    LEARNING_RATE,
    BETA,
    EPSILON,
    APPROX_KL,
    CLIP_FRACTION,
    EXPLAINED_VARIANCE,
)
DIAGNOSTICS = UPDATE_KEYS[-3:]
"""Whether an update still moves the policy (and how well the critic fits), per update."""
CURVE_KEYS = (STEPS, CUMULATIVE_REWARD, SUCCESS)
"""inner_updates.csv's learning curve: each update's steps so far, its buffer's episodes'
return and success."""
EXTRA_COLUMNS = (
    "algorithm",
    "task_index",
    "episodes",
    "policy_loss",
    "value_loss",
    "entropy",
    "theta_delta_norm",
    "total_env_steps",
    "elo",
    "decisive_share",
)


def nanmean(values: Iterable[float]) -> float:
    """Mean of the finite values; NaN (without a warning) when there are none."""
    finite = [float(v) for v in values if v == v]
    return float(np.mean(finite)) if finite else float("nan")


def plain(value: Any) -> Any:
    """Rows as Python primitives (what `torch.load(weights_only=True)` reads back)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def extra_columns(lesson_names: Iterable[str]) -> list[str]:
    """meta_steps.csv columns beyond DESIGN's: ours, one per curriculum, the env parameters."""
    return [*EXTRA_COLUMNS, *(LESSON_PREFIX + n for n in lesson_names), "env_params"]


def table_columns(
    lesson_names: Iterable[str], per_update: bool
) -> tuple[list[str], list[str] | None]:
    """meta_steps.csv's extra columns, and inner_updates.csv's (None: no such table)."""
    inner = ["update", "task", *UPDATE_KEYS, *CURVE_KEYS] if per_update else None
    return extra_columns(lesson_names), inner


@dataclass(frozen=True)
class MetaStep:
    """One meta-step's outcome, before it is committed."""

    index: int
    algorithm: str
    tasks: list[Task]
    results: list[TrainResult]
    hyper: Hyper
    outer_lr: float
    theta_delta: float
    env_params: dict[str, float]
    lessons: dict[str, int]
    wall_time_s: float


def rows(step: MetaStep, theta: Weights, total_env_steps: int) -> list[dict[str, Any]]:
    """One meta_steps.csv row per task trained (joint trains all its tasks in one row)."""
    lessons = {LESSON_PREFIX + n: v for n, v in step.lessons.items()}
    env_params = ";".join(f"{n}={v:g}" for n, v in sorted(step.env_params.items()))
    merged = len(step.results) < len(step.tasks)
    out = []
    for i, result in enumerate(step.results):
        s, task = result.stats, step.tasks[i]
        family = "+".join(sorted({t.family for t in step.tasks})) if merged else task.family
        out.append(
            {
                "meta_step": step.index,
                "task": family,
                "task_params": task.params_json(),
                "inner_steps": int(s["steps"]),
                "mean_reward": s[CUMULATIVE_REWARD],
                "success_rate": s[SUCCESS],
                "learning_rate": step.hyper.learning_rate,
                "beta": step.hyper.beta,
                "epsilon": step.hyper.epsilon,
                "outer_lr": step.outer_lr,
                "weight_delta_norm": distance(result.weights, theta),
                "wall_time_s": s["wall_time_s"] if len(step.results) > 1 else step.wall_time_s,
                "algorithm": step.algorithm,
                "task_index": i,
                "episodes": int(s["episodes"]),
                "policy_loss": s[POLICY_LOSS],
                "value_loss": s[VALUE_LOSS],
                "entropy": s[ENTROPY],
                "theta_delta_norm": step.theta_delta,
                "total_env_steps": total_env_steps,
                "elo": s.get(ELO, float("nan")),
                "decisive_share": s.get(DECISIVE_STAT, float("nan")),
                **lessons,
                "env_params": env_params,
            }
        )
    return out


def update_rows(step: MetaStep, table_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """inner_updates.csv: one row per PPO update of every inner training."""
    return [
        {
            "meta_step": step.index,
            "update": j + 1,
            "task": row["task"],
            **{key: update[key] for key in UPDATE_KEYS},
            **{key: update.get(key, math.nan) for key in CURVE_KEYS},
        }
        for row, result in zip(table_rows, step.results, strict=True)
        for j, update in enumerate(result.updates)
    ]


def scalars(
    step: MetaStep, table_rows: Sequence[Mapping[str, Any]], task_counts: Mapping[str, int]
) -> dict[str, float]:
    """The writers' scalars: ML-Agents' names where they exist, Meta/... for ours."""
    out = {
        CUMULATIVE_REWARD: nanmean(r["mean_reward"] for r in table_rows),
        EPISODE_LENGTH: nanmean(r.stats[EPISODE_LENGTH] for r in step.results),
        POLICY_LOSS: nanmean(r["policy_loss"] for r in table_rows),
        VALUE_LOSS: nanmean(r["value_loss"] for r in table_rows),
        ENTROPY: nanmean(r["entropy"] for r in table_rows),
        LEARNING_RATE: step.hyper.learning_rate,
        BETA: step.hyper.beta,
        EPSILON: step.hyper.epsilon,
        OUTER_LR: step.outer_lr,
        WEIGHT_DELTA_NORM: step.theta_delta,
        SUCCESS_RATE: nanmean(r["success_rate"] for r in table_rows),
    }
    for key in DIAGNOSTICS:  # mean over the meta-step's updates; inner_updates.csv has each
        out[key] = nanmean(u[key] for r in step.results for u in r.updates)
    for family in sorted({r["task"] for r in table_rows}):
        mine = [r for r in table_rows if r["task"] == family]
        out[f"Meta/{family}/Reward"] = nanmean(r["mean_reward"] for r in mine)
        out[f"Meta/{family}/Success"] = nanmean(r["success_rate"] for r in mine)
    for family, count in task_counts.items():
        out[f"Meta/{family}/Count"] = float(count)
    if step.lessons:
        out[LESSON] = float(sum(step.lessons.values()))
    decisive = [
        r["decisive_share"]
        for r in table_rows
        if r.get("decisive_share") == r.get("decisive_share")
    ]
    if decisive:
        out[DECISIVE_STAT] = nanmean(decisive)
    return out


def elo_points(step: MetaStep, env_steps_before: int) -> list[tuple[int, dict[str, float]]]:
    """Self-play/ELO per summary period of the step's games, at the run's env step of its end.

    As ML-Agents' summaries: the mean rating over the period's games (none without one).
    """
    points, offset = [], env_steps_before
    for result in step.results:
        state = result.self_play_state or {}
        for end, _, mean in state.get(SUMMARIES, ()):
            points.append((offset + int(end), {ELO: float(mean)}))
        offset += int(result.stats["steps"])
    return points
