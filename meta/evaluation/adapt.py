"""meta-eval's measurements: held-out tasks, adaptation by inner PPO, episodes without training."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from meta.algorithm.ppo.config import PPOConfig
from meta.algorithm.ppo.rollout import NullTimers, Timers
from meta.algorithm.ppo.weights import Weights
from meta.algorithm.request import TrainRequest, TrainResult
from meta.config import Config
from meta.evaluation.config import EvalConfig, Procedure
from meta.evaluation.measured import measured, measured_together
from meta.evaluation.statistics import Measurement
from meta.evaluation.tasks import EvalTask, derived_seed
from meta.runtime.envpool import EnvPool
from meta.runtime.executor import Executor, retrying
from meta.runtime.jobs import run_request
from meta.runtime.slots import claimed_slot

_ADAPT = 0xADA7
RETRIES = 3
"""Lost workers (a Ray actor's process died) meta-eval retries in all before it gives up."""


@dataclass(frozen=True)
class Setting:
    """What every adaptation shares: the run's network and PPO, and meta-eval's options."""

    run: Config
    eval: EvalConfig
    seed: int
    device: str = "cpu"

    def buffer_size(self, procedure: Procedure) -> int:
        """Agent-steps per update of `procedure`."""
        return procedure.buffer_size or self.eval.buffer_size

    def steps_per_update(self, agents: int, procedure: Procedure | None = None) -> int:
        """Agent-steps one update collects (the buffer rounded up to whole rounds of agents)."""
        buffer = self.buffer_size(procedure or Procedure())
        return math.ceil(buffer / agents) * agents

    def budgets(self, procedure: Procedure | None = None) -> list[int]:
        """eval.budgets, continued so that every procedure reaches the same env-step horizon.

        The horizon is the largest budget at the largest update size among eval.adaptation (or
        eval.search's choices); a procedure with smaller updates also gets the budgets of the
        larger size's env steps beyond its own largest budget (e.g. 24, 32, 48, 64 updates of
        512 for 6, 8, 12, 16 of 2,048), so that "not reached" means the same number of env
        steps for every start.
        """
        own = self.buffer_size(procedure or Procedure())
        largest, top = self.largest_update(), max(self.eval.budgets)
        scaled = {-(-b * largest // own) for b in self.eval.budgets}
        return sorted({*self.eval.budgets, *(b for b in scaled if b > top)})

    def largest_update(self) -> int:
        """The largest buffer size a procedure may adapt with."""
        return max(self.buffer_size(Procedure(buffer_size=b)) for b in self.eval.update_sizes())

    def horizon(self) -> int:
        """Agent-steps every procedure adapts for at least (the largest budget's)."""
        return max(self.eval.budgets) * self.largest_update()

    def ppo(self, procedure: Procedure | None = None) -> PPOConfig:
        """The run's PPO with the procedure's optimizer, learning rate and buffer; beta and
        epsilon held constant, the learning rate too unless the procedure's schedule is linear.

        An adaptation runs a number of updates (its largest budget), not of agent-steps. A
        linear learning rate decays over max_steps, that largest budget's agent-steps (the
        horizon every procedure reaches), to ML-Agents' floor: each budget measured is a
        snapshot of that one training, part-way down its schedule.
        """
        procedure = procedure or Procedure()
        buffer = self.buffer_size(procedure)
        return replace(
            self.run.ppo,
            optimizer=procedure.optimizer or self.run.ppo.optimizer,
            learning_rate=procedure.learning_rate or self.run.ppo.learning_rate,
            buffer_size=buffer,
            num_epoch=procedure.num_epoch or self.run.ppo.num_epoch,
            batch_size=min(procedure.batch_size or self.run.ppo.batch_size, buffer),
            max_steps=max(*self.budgets(procedure), 1) * buffer,
            learning_rate_schedule=procedure.learning_rate_schedule or "constant",
            beta_schedule="constant",
            epsilon_schedule="constant",
        )

    def label(self, procedure: Procedure) -> str:
        """The procedure in words, e.g. `adam lr=0.003 buffer=512 reset=value_head`."""
        ppo = self.run.ppo
        optimizer = procedure.optimizer or ppo.optimizer
        learning_rate = procedure.learning_rate or ppo.learning_rate
        label = f"{optimizer} lr={learning_rate:g} buffer={self.buffer_size(procedure)}"
        if procedure.num_epoch is not None:
            label += f" epochs={procedure.num_epoch}"
        if procedure.batch_size is not None:
            label += f" batch={procedure.batch_size}"
        if procedure.learning_rate_schedule is not None:
            label += f" schedule={procedure.learning_rate_schedule}"
        if procedure.log_std is not None:
            label += f" log_std={procedure.log_std:g}"
        if procedure.reset:
            label += f" reset={'+'.join(procedure.reset)}"
        return label


@dataclass(frozen=True)
class AdaptJob:
    """One adaptation: a start on a task with an adaptation seed (picklable, self-contained)."""

    setting: Setting
    task: EvalTask
    method: str
    start: Weights | None
    """None: a fresh random init (scratch)."""
    seed: int
    meta_seed: int = 0
    """Seed of the meta-training run the start comes from (recorded, not used to adapt)."""
    reference: Weights | None = None
    """The run's meta-learned weights: the fixed opponent games are also measured against."""
    procedure: Procedure = field(default_factory=Procedure)
    """How the start adapts (optimizer, learning rate, update size)."""
    pretraining: str = ""
    """joint: the PPO settings its start was pretrained with (recorded)."""

    def request(self) -> TrainRequest:
        """The adaptation as a training request: the start's weights at every budget back."""
        setting, task, procedure = self.setting, self.task, self.procedure
        budgets = setting.budgets(procedure)
        return TrainRequest(
            tasks=(task.task,),
            weights=self.start,
            seed=derived_seed(
                setting.seed, task.split, task.task.family, task.index, self.seed, _ADAPT
            ),
            ppo=setting.ppo(procedure),
            network=setting.run.network,
            device=setting.device,
            updates=max(budgets),
            log_std=procedure.log_std,
            reset=tuple(procedure.reset),
            snapshots=tuple(budgets),
        )

    def training(self) -> TrainRequest:
        """The request (meta.runtime.jobs.TrainingJob)."""
        return self.request()

    def finish(self, pool: EnvPool, result: TrainResult) -> list[Measurement]:
        """The measurements of the trained result at every budget."""
        return measured(pool, self, result)

    @staticmethod
    def finish_together(
        pool: EnvPool, jobs: Sequence[AdaptJob], results: Sequence[TrainResult]
    ) -> list[list[Measurement]]:
        """Each job's `finish` of a stack's results, measured in lockstep (FinishedTogether)."""
        return measured_together(pool, jobs, results)

    def __call__(self, pool: EnvPool, timers: Timers) -> list[Measurement]:
        """The job's measurements, on environments of its own (meta.runtime.jobs.Job)."""
        return adapt_job(self)


def adaptations(executor: Executor, jobs: Sequence[AdaptJob]) -> Iterator[list[Measurement]]:
    """Every job's measurements on `executor`, in the jobs' order."""
    return executor.run(jobs, retrying(RETRIES))


def adapt_job(job: AdaptJob) -> list[Measurement]:
    """Run one job with environments of its own (the same in any process).

    On builds the job claims a block of ports no other job on the machine holds, so that jobs
    in parallel workers never launch on the same ports.
    """
    env = job.setting.run.env
    slot = claimed_slot(env.base_port) if env.backend == "unity" else nullcontext(0)
    with slot as claimed:
        pool = EnvPool(env, claimed)
        try:
            rows = adapt(pool, job)
        finally:
            pool.close()
    return rows


def adapt(pool: EnvPool, adapt_job: AdaptJob) -> list[Measurement]:
    """Adapt from the job's start (None: a fresh random init) and measure at every budget.

    A game of teams adapts with the ghost trainer and is measured by its win rates against
    a random policy and against the run's weights (meta.evaluation.games).
    """
    result = run_request(adapt_job.request(), pool, NullTimers())
    return measured(pool, adapt_job, result)
