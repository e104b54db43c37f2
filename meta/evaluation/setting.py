"""What every adaptation of a meta-eval shares: the run's network and PPO, budgets, options."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from meta.config import Config
from meta.config.evaluation import EvalConfig, Procedure
from meta.config.ppo import PPOConfig


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
