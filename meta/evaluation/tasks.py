"""meta-eval's tasks: per family and split, drawn from streams training never draws from."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from meta.algorithm.reptile import TaskSampler
from meta.algorithm.request import Task
from meta.config import TaskConfig
from meta.config.evaluation import EVAL_SPLITS
from meta.curriculum.lessons import EnvironmentParameters

if TYPE_CHECKING:
    from meta.evaluation.setting import Setting

_TASKS = 0x7E57


@dataclass(frozen=True)
class EvalTask:
    """A task to adapt to: its split, its index within (family, split), its parameters."""

    split: str
    index: int
    task: Task


def derived_seed(seed: int, split: str, family: str, *more: int) -> int:
    """A seed that is a pure function of meta-eval's seed and what it is for."""
    words = [seed, EVAL_SPLITS.index(split), zlib.crc32(family.encode()), *more]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


def family_configs(tasks: list[TaskConfig]) -> list[TaskConfig]:
    """The run's families, once each (the first entry of a family keeps its overrides)."""
    seen: dict[str, TaskConfig] = {}
    for task in tasks:
        seen.setdefault(task.name, replace(task, weight=1.0))
    return list(seen.values())


def sample_tasks(
    setting: Setting, parameters: EnvironmentParameters
) -> dict[tuple[str, str], list[EvalTask]]:
    """tasks_per_family tasks per (family, split), from streams training never draws from.

    `train` and `validation` tasks (the train ranges, streams of their own) get the run's
    environment parameters as training did (they win); `test`
    tasks keep their held-out ranges, environment parameters filling in the others only.
    Values that meta.tasks[*].params fixes or ranges are kept on both splits.
    """
    out: dict[tuple[str, str], list[EvalTask]] = {}
    ev = setting.eval
    for split in dict.fromkeys([ev.selection_split, *ev.splits]):
        for family in family_configs(setting.run.meta.tasks):
            sampler = TaskSampler([family], "test" if split == "test" else "train")
            rng = np.random.default_rng(derived_seed(setting.seed, split, family.name, _TASKS))
            patches = _patches(sampler, rng, ev.tasks_per_family, split) if ev.stratify else []
            tasks = []
            for i in range(ev.tasks_per_family):
                patch = patches[i % len(patches)] if patches else None
                task, env_params = sampler.sample(rng, patch), parameters.sample(rng)
                merged = (
                    {**env_params, **task.params}
                    if split == "test"
                    else {**task.params, **env_params}
                )
                tasks.append(EvalTask(split, i, Task(task.family, merged)))
            out[family.name, split] = tasks
    return out


def _patches(
    sampler: TaskSampler, rng: np.random.Generator, count: int, split: str
) -> list[dict[str, int]]:
    """The split's patches in a shuffled order; ValueError if `count` tasks miss one."""
    patches = sampler.patches()
    if count < len(patches):
        (task,) = sampler.tasks
        raise ValueError(
            f"eval.stratify: eval.tasks_per_family={count} leaves some of {task.name}'s "
            f"{len(patches)} {split} patches without a task (give at least {len(patches)})"
        )
    return [patches[i] for i in rng.permutation(len(patches))]
