"""A search's `optimized_metric`: the names a trial can return, checked before any training.

`success_iqm@K` and `reward_iqm@K`: the run's own start adapted K PPO updates on fresh tasks of
the training distribution, the IQM over tasks (families pooled) and adaptation seeds.
`neg_steps_to_80`: minus the env steps until that success IQM reaches 0.8 (not reached: one
update beyond the largest budget). Every one is higher-is-better, so a search maximises it. It
is never measured on `test`: held-out tasks stay for the comparison after the search.
"""

from __future__ import annotations

from collections.abc import Sequence

PER_BUDGET = ("success_iqm", "reward_iqm")
STEPS = "neg_steps_to_80"
HELD_OUT = "test"


def parse_metric(name: str, budgets: Sequence[int]) -> tuple[str, int | None]:
    """(metric, budget) of `name`; ValueError naming what is wrong with it."""
    known = f"{PER_BUDGET[0]}@<budget>, {PER_BUDGET[1]}@<budget> or {STEPS}"
    if name == STEPS:
        return STEPS, None
    metric, _, budget = name.partition("@")
    if metric not in PER_BUDGET or not budget.isdigit():
        raise ValueError(f"optimized_metric: unknown {name!r} (use {known})")
    if int(budget) not in budgets:
        raise ValueError(
            f"optimized_metric={name}: budget {budget} is not among eval.budgets {list(budgets)}"
        )
    return metric, int(budget)


def describe(name: str) -> str:
    """What the metric `name` measures, in words (console, meta-report, the manual)."""
    metric, _, budget = name.partition("@")
    where = "from the run's meta-learned start on fresh tasks of the training distribution"
    if metric == STEPS:
        return f"minus the env steps until the success IQM reaches 0.8, adapting {where}"
    quantity = "success" if metric == PER_BUDGET[0] else "reward"
    updates = "update" if budget == "1" else "updates"
    return f"{quantity} IQM after {budget} adaptation {updates} {where}"


def check_objective(name: str, splits: Sequence[str], budgets: Sequence[int]) -> None:
    """Raise ValueError if the objective is unknown or would read the held-out split."""
    parse_metric(name, budgets)
    if HELD_OUT in splits or not splits:
        raise ValueError(
            f"optimized_metric={name}: a search's objective is measured on tasks of the training "
            f"distribution, never on {HELD_OUT!r}; eval.splits is {list(splits)} "
            "(use eval.splits=[train])"
        )
