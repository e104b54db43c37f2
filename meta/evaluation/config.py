"""Settings of meta-eval: which starts, tasks, budgets and statistics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvalConfig:
    """meta-eval: adaptation from the meta-learned start against baselines."""

    joint_run_id: str | None = None
    """Run id (in results_dir) of a `joint` baseline; null: meta-eval trains one into
    <run>/eval/joint with the run's own configuration and env-step budget."""
    budgets: list[int] = field(default_factory=lambda: [0, 1, 2, 5, 10, 20])
    """Adaptation budgets in PPO updates (of buffer_size agent-steps each)."""
    seeds: int = 5
    """Adaptation seeds per task and method."""
    tasks_per_family: int = 4
    """Tasks drawn per family and split."""
    splits: list[str] = field(default_factory=lambda: ["test", "train"])
    """Task splits: held-out `test` ranges and fresh samples of the `train` ranges."""
    buffer_size: int = 2048
    """Agent-steps per adaptation update (constant schedules, the run's other PPO settings)."""
    eval_episodes: int = 64
    """Episodes measured after each budget, without training."""
    deterministic: bool = True
    """Measure the mean action (true) or sampled actions (false)."""
    bootstrap_samples: int = 2000
    """Resamples of the stratified bootstrap confidence intervals."""
    confidence: float = 0.95
    """Level of the confidence intervals."""
    threshold: float = 0.8
    """Steps-to-threshold: fraction of the best final success a method must reach."""
    success_target: float = 0.8
    """steps_to_80.csv: the success IQM (absolute) whose first budget it reports."""
    run_ids: list[str] = field(default_factory=list)
    """Meta-training runs evaluated together, one per seed (configurations equal but for
    `seed`); each gets its own joint baseline. Empty: `run_id` alone."""
    workers: int = 1
    """Processes for adaptation jobs and joint baselines (spawned, 1 torch thread each);
    1: everything in this process. Results are the same for any number."""
    out_dir: str | None = None
    """Where the results go; null: <results_dir>/<run_id>/eval for one run, and
    <results_dir>/eval_<id>+<id>+... for several."""
