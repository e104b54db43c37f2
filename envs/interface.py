"""What a trainer needs of an environment, as protocols every backend satisfies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from mlagents_envs.base_env import ActionTuple, BehaviorSpec, DecisionSteps, TerminalSteps
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel


class AgentEnvironment(Protocol):
    """The calls of mlagents_envs' BaseEnv that training makes; any BaseEnv has them."""

    @property
    def behavior_specs(self) -> Mapping[str, BehaviorSpec]:
        """Behavior names and their specs."""
        ...

    def reset(self) -> None:
        """Start new episodes in every area."""
        ...

    def step(self) -> None:
        """Advance the simulation by one step."""
        ...

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        """The agents asking for a decision, and those whose episode ended."""
        ...

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        """Actions of every deciding agent, in DecisionSteps order."""
        ...

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        """One agent's action."""
        ...

    def close(self) -> None:
        """Release the environment."""
        ...


class TaskEnvironment(AgentEnvironment, Protocol):
    """A task's environment: native, concatenated or a build, as the trainer drives it."""

    @property
    def stats_channel(self) -> StatsSideChannel:
        """The tasks' stats (Environment/Success ...), as a Unity build sends them."""
        ...

    def set_parameters(self, **params: float) -> None:
        """Environment parameters, applied from each area's next episode."""
        ...
