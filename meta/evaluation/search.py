"""eval.search: each start's adaptation procedure found by a seeded Optuna search.

Every start (method and, for joint, pretraining) gets, per family, eval.search.trials trials of
a TPE study of its own (sampler seeded from eval.search.seed, the family and the start). A
trial proposes a Procedure from the declared space; the start adapts with it on the selection
split's tasks of the family (every meta-training run, every adaptation seed) and the trial
scores, to be minimised,

    steps-to-80 in env steps (not reached: twice the horizon) + (1 - success AUC over the horizon)

(steps-to-80 as eval.reach reads a curve: its first budget at the target, or the first from
which it stays there)

which orders trials by steps-to-80 first and by AUC among equal steps (steps differ by whole env
steps, 1 - AUC is below 1), as selection.rank does. A proposal a study already tried is scored
from the measurements it had, not adapted again. TPE proposes at random for its first
min(10, trials // 2) trials (at least 1), then from the scores so far; with run_first every
start's first trial is the run's own PPO settings instead of a random one. Trials of all studies
run a round at a time, so that parallel workers have every study's jobs at once.
"""

from __future__ import annotations

import math
import warnings
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import optuna

from meta.config.evaluation import Procedure, SearchConfig
from meta.evaluation.selection import SelectionRow, select
from meta.evaluation.setting import Setting
from meta.evaluation.statistics import Measurement, Resampling

StartKey = tuple[str, str, str]
"""(family, method, pretraining): one start's search."""
NO_RESET = "none"
SCHEDULE = "learning_rate_schedule"


def propose(trial: optuna.trial.BaseTrial, space: SearchConfig) -> Procedure:
    """The procedure a trial proposes from the declared space (undeclared fields: null)."""
    procedure = Procedure()
    if space.optimizer:
        procedure.optimizer = str(trial.suggest_categorical("optimizer", list(space.optimizer)))
    if space.learning_rate:
        low, high = space.learning_rate
        value = trial.suggest_float("learning_rate", low, high, log=True)
        procedure.learning_rate = float(f"{value:.3g}")
    for name in ("buffer_size", "num_epoch", "batch_size"):
        if getattr(space, name):
            choice = trial.suggest_categorical(name, getattr(space, name))
            assert isinstance(choice, int)
            setattr(procedure, name, choice)
    schedules = list(space.learning_rate_schedule)
    if schedules:
        # one choice is not asked for, so a space left at [constant] proposes (and records in
        # its studies) exactly the trials it did before the field existed
        chosen = (
            schedules[0] if len(schedules) == 1 else trial.suggest_categorical(SCHEDULE, schedules)
        )
        procedure.learning_rate_schedule = None if chosen == "constant" else str(chosen)
    if space.reset:
        names = ["+".join(r) or NO_RESET for r in space.reset]
        chosen = str(trial.suggest_categorical("reset", names))
        procedure.reset = [] if chosen == NO_RESET else chosen.split("+")
    return procedure


def sampler_seed(seed: int, key: StartKey) -> int:
    """The seed of one start's sampler: the search's seed and the start's names."""
    return zlib.crc32("/".join((str(seed), *key)).encode())


class _Options(Resampling):
    """What `select` is given besides the rows: the bootstrap's options and the horizon."""

    horizon: float


@dataclass
class Search:
    """Every start's study, its trials' procedures and the measurements they gave."""

    setting: Setting
    keys: Sequence[StartKey]
    studies: dict[StartKey, optuna.Study] = field(default_factory=dict)
    tried: dict[StartKey, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Per start, each trial's procedure label, in trial order."""
    procedures: dict[str, Procedure] = field(default_factory=dict)
    measured: dict[tuple[StartKey, str], list[Measurement]] = field(default_factory=dict)
    _asked: dict[StartKey, optuna.trial.Trial] = field(default_factory=dict)

    def __post_init__(self) -> None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        space = self.space
        first = space.run_procedure(self.setting.run.ppo) if space.run_first else None
        if first is not None and "reset" in first:
            first["reset"] = NO_RESET  # the choice's name, as propose reads it
        startup = min(10, max(1, space.trials // 2))  # Optuna's 10, or half the trials
        for key in self.keys:
            sampler = optuna.samplers.TPESampler(
                n_startup_trials=startup, seed=sampler_seed(space.seed, key)
            )
            self.studies[key] = optuna.create_study(direction="minimize", sampler=sampler)
            if first is not None:
                with warnings.catch_warnings():  # optuna 2.10 marks enqueue_trial experimental
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    self.studies[key].enqueue_trial(first)

    @property
    def space(self) -> SearchConfig:
        """The declared space (eval.search)."""
        assert self.setting.eval.search is not None
        return self.setting.eval.search

    def ask(self) -> dict[StartKey, Procedure]:
        """Each start's next proposal not tried yet (one already tried is scored at `tell`)."""
        new = {}
        for key, study in self.studies.items():
            trial = self._asked[key] = study.ask()
            procedure = propose(trial, self.space)
            label = self.setting.label(procedure)
            self.procedures.setdefault(label, procedure)
            if (key, label) not in self.measured:
                new[key] = procedure
            self.tried[key].append(label)
        return new

    def tell(self, measurements: Sequence[Measurement]) -> None:
        """Record the round's measurements and score every start's trial."""
        for m in measurements:
            key = (m.family, m.method, m.pretraining)
            self.measured.setdefault((key, m.adaptation), []).append(m)
        for key, study in self.studies.items():
            study.tell(self._asked.pop(key), self.objective(self.row(key, self.tried[key][-1])))

    def row(self, key: StartKey, label: str) -> SelectionRow:
        """The selection row of one start's procedure over the common horizon."""
        rows = self.measured[key, label]
        ev = self.setting.eval
        (row,) = select(rows, rows[0].split, ev.success_target, **self._options(), reach=ev.reach)
        return row

    def objective(self, row: SelectionRow) -> float:
        """steps-to-80 (not reached: twice the horizon) + (1 - AUC): lower is better."""
        steps = row.steps_to_80 if math.isfinite(row.steps_to_80) else 2.0 * self.horizon
        return steps + (1.0 - row.auc)

    @property
    def horizon(self) -> float:
        """Agent-steps every procedure adapts for at least."""
        return float(self.setting.horizon())

    def _options(self) -> _Options:
        ev = self.setting.eval
        return {
            "seed": self.setting.seed,
            "samples": ev.bootstrap_samples,
            "confidence": ev.confidence,
            "horizon": self.horizon,
        }

    def measurements(self) -> list[Measurement]:
        """Every measurement of every trial (a procedure tried twice: once)."""
        return [m for rows in self.measured.values() for m in rows]

    def selection(self) -> list[SelectionRow]:
        """One row per trial, each start's best trial per family marked `selected`."""
        ev = self.setting.eval
        rows = select(
            self.measurements(),
            ev.selection_split,
            ev.success_target,
            **self._options(),
            reach=ev.reach,
        )
        by_candidate = {(r.family, r.method, r.pretraining, r.adaptation): r for r in rows}
        out = []
        for key in self.keys:
            first: set[str] = set()
            for trial, label in enumerate(self.tried[key]):
                row = by_candidate[(*key, label)]
                selected = row.selected and label not in first
                first.add(label)
                out.append(replace(row, selected=selected, trial=trial))
        return out
