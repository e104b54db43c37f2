"""The meta-training runs meta-eval compares: their configurations, weights and joint baselines."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

import envs
from envs.constants import BEHAVIOR_NAME
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.registry import entry
from meta.config import Config, RuntimeConfig
from meta.config.evaluation import EvalConfig, Procedure
from meta.config.ppo import PPOConfig
from meta.config.retired import upgraded
from meta.run.configuration import flatten
from meta.run.directory import CONFIG_FILE, STATUS_FILE, RunError
from meta.run.status import StatusError, TrainingStatus

log = logging.getLogger(__name__)
JOINT_RUN = "joint"
MATCHED = ("seed", "meta", "ppo", "network", "env", "environment_parameters")
"""Sections a reused joint baseline must share with the run."""
FREE = (
    "seed",
    "run_id",
    "results_dir",
    "resume",
    "force",
    "eval",
    "logger",
    "checkpoint",
    "runtime",
)
"""Keys in which runs evaluated together may differ (the seed, and what does not train)."""
FREE_KEYS = ("env.base_port", "env.path", "env.timeout_wait", "env.max_restarts")


@dataclass
class JointBaseline:
    """Where the joint baseline's weights come from, or how meta-eval trains them."""

    results_dir: str
    run_id: str
    train: Config | None = None
    """The joint run's configuration when it still has to be trained (or resumed)."""
    pretraining: str = ""
    """The PPO settings it is pretrained with, in words (`adam lr=0.0003 buffer=2048`)."""

    @property
    def committed(self) -> int:
        """Meta-steps its run directory holds (0 before its first commit)."""
        path = Path(self.results_dir) / self.run_id / STATUS_FILE
        try:
            return int(TrainingStatus.load(path).get(BEHAVIOR_NAME, "meta_step", 0))
        except StatusError:
            return 0


def pretraining_label(ppo: PPOConfig) -> str:
    """A pretraining's PPO settings in words."""
    return f"{ppo.optimizer} lr={ppo.learning_rate:g} buffer={ppo.buffer_size}"


def pretraining_ppo(run: Config, settings: Procedure) -> PPOConfig:
    """The run's PPO with a joint pretraining's optimizer, learning rate and buffer."""
    buffer = settings.buffer_size or run.ppo.buffer_size
    return replace(
        run.ppo,
        optimizer=settings.optimizer or run.ppo.optimizer,
        learning_rate=settings.learning_rate or run.ppo.learning_rate,
        buffer_size=buffer,
        batch_size=min(run.ppo.batch_size, buffer),
    )


def joint_dir_name(settings: Procedure, ppo: PPOConfig) -> str:
    """`joint` for the run's own PPO settings, else `joint_<optimizer>_lr<lr>_buffer<size>`."""
    if settings == Procedure():
        return JOINT_RUN
    return f"{JOINT_RUN}_{ppo.optimizer}_lr{ppo.learning_rate:g}_buffer{ppo.buffer_size}"


def run_config(run_dir: Path, results_dir: str) -> Config:
    """The run's own configuration.yaml as a Config (its eval section left to meta-eval)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise RunError(f"{path} is missing: not a meta-train run directory")
    raw = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(raw, dict)
    upgraded(raw)  # type: ignore[arg-type]
    for key in ("eval", "run_id", "optimized_metric"):  # meta-eval's own, or a search's
        raw.pop(key, None)
    merged = OmegaConf.merge(OmegaConf.structured(Config), raw)
    cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    return replace(cfg, results_dir=results_dir, resume=False, force=False)


def load_run(results_dir: str, run_id: str) -> tuple[str, Config]:
    """A run's id and configuration; RunError naming it when it is not a finished-enough run."""
    run_dir = Path(results_dir) / run_id
    if not run_dir.is_dir():
        raise RunError(f"run {run_id!r} does not exist in {results_dir}")
    run = run_config(run_dir, results_dir)
    status_path = run_dir / STATUS_FILE
    if status_path.is_file():
        done = int(TrainingStatus.load(status_path).get(BEHAVIOR_NAME, "meta_step", run.meta.steps))
        if done < run.meta.steps:
            log.warning("run %s stopped at meta-step %d of %d", run_id, done, run.meta.steps)
    return run_id, run


def _free(key: str) -> bool:
    return key.split(".")[0] in FREE or any(key == k or key.startswith(k + ".") for k in FREE_KEYS)


def check_same(runs: Sequence[tuple[str, Config]]) -> None:
    """ValueError naming the first key (other than the seed) in which the runs differ."""
    first_id, first = runs[0]
    reference = flatten(asdict(first))
    for run_id, cfg in runs[1:]:
        other = flatten(asdict(cfg))
        for key in sorted(set(reference) | set(other)):
            if _free(key) or reference.get(key) == other.get(key):
                continue
            raise ValueError(
                f"runs evaluated together may differ only in seed: {run_id!r} has {key}="
                f"{other.get(key)!r}, {first_id!r} has {reference.get(key)!r}"
            )
        if cfg.seed == first.seed:
            raise ValueError(f"runs {first_id!r} and {run_id!r} have the same seed {cfg.seed}")


def check_loads(run: Config, weights: Weights, what: str) -> None:
    """Fail early when weights do not fit the run's network."""
    env = envs.make(run.meta.tasks[0].name)
    try:
        policy_for(env, run.network).load_state_dict(weights)
    except RuntimeError as error:
        raise RunError(f"{what}: weights do not fit the run's network") from error
    finally:
        env.close()


def joint_training(run: Config, eval_dir: Path, settings: Procedure | None = None) -> JointBaseline:
    """The joint run meta-eval trains: the run's config with meta.algorithm=joint.

    `settings` replaces the run's optimizer, learning rate and buffer for the pretraining
    (the env-step budget stays the run's).
    """
    from meta.trainer import plan_training

    settings = settings or Procedure()
    ppo = pretraining_ppo(run, settings)
    name = joint_dir_name(settings, ppo)
    # games of teams cannot share a joint run's areas: the baseline trains the other families
    tasks = [t for t in run.meta.tasks if not envs.family(t.name).adversarial]
    cfg = replace(
        run,
        ppo=ppo,
        meta=replace(run.meta, algorithm=JOINT_RUN, tasks=tasks or run.meta.tasks),
        results_dir=str(eval_dir),
        initialize_from=None,
        eval=EvalConfig(),
        runtime=RuntimeConfig(),  # a chain of trainings: nothing to run side by side
        logger=replace(run.logger, console=False),  # meta-eval's bar counts its meta-steps
    )
    joint_dir, label = eval_dir / name, pretraining_label(ppo)
    same = _same_config(joint_dir, cfg)
    if same and (joint_dir / f"{BEHAVIOR_NAME}.pt").is_file():
        log.info("reusing the joint baseline in %s", joint_dir)
        return JointBaseline(str(eval_dir), name, pretraining=label)
    if same and (joint_dir / BEHAVIOR_NAME / "checkpoint.pt").is_file():
        cfg = replace(cfg, resume=True)
    elif joint_dir.exists():
        cfg = replace(cfg, force=True)
    plan_training(cfg, name)
    return JointBaseline(str(eval_dir), name, cfg, label)


def _same_config(joint_dir: Path, cfg: Config) -> bool:
    """Whether an existing joint run was trained with this configuration.

    The saved configuration is read as run_config reads a run's: a setting added since it was
    written takes its default, which keeps the behaviour the run was trained with.
    """
    path = joint_dir / CONFIG_FILE
    if not path.is_file():
        return False
    raw = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(raw, dict):
        return False
    try:
        schema = OmegaConf.structured(Config)
        kept = {k: raw[k] for k in MATCHED if k in raw}
        saved = OmegaConf.to_container(OmegaConf.merge(schema, kept))
    except OmegaConfBaseException:
        return False  # a setting that no longer exists, or a value it cannot take
    expected = asdict(cfg)
    return isinstance(saved, dict) and all(saved[k] == expected[k] for k in MATCHED)


OTHER_FREE = ("meta.algorithm", "meta.outer_lr", "meta.outer_lr_final")
"""Keys in which another meta-learner's run may differ from the evaluated run."""


def check_other(reference: tuple[str, Config], other: tuple[str, Config]) -> None:
    """ValueError unless `other` is another meta-learner on the run's configuration."""
    (first_id, first), (other_id, cfg) = reference, other
    if cfg.meta.algorithm == first.meta.algorithm or entry(cfg.meta.algorithm).joint_baseline:
        raise ValueError(
            f"eval.other_run_ids: run {other_id!r} has meta.algorithm={cfg.meta.algorithm!r}; "
            f"give runs of another meta-learner than {first.meta.algorithm!r} (e.g. fomaml)"
        )
    mine, theirs = flatten(asdict(first)), flatten(asdict(cfg))
    for key in sorted(set(mine) | set(theirs)):
        if key in OTHER_FREE or _free(key) or mine.get(key) == theirs.get(key):
            continue
        raise ValueError(
            f"eval.other_run_ids: {other_id!r} has {key}={theirs.get(key)!r}, {first_id!r} has "
            f"{mine.get(key)!r} (other meta-learners may differ only in {', '.join(OTHER_FREE)})"
        )
