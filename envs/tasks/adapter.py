"""mlagents_envs BaseEnv over a batched task core, with Unity's step semantics.

Every agent requests a decision every step (one agent per area, agent id = area index). An
agent whose episode ended is in the TerminalSteps of that step and, already reset, in its
DecisionSteps too, with reward 0, as a Unity build with a DecisionRequester does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
    _ActionTupleBase,
)
from mlagents_envs.exception import UnityActionException, UnityEnvironmentException

from envs.constants import BEHAVIOR_NAME
from envs.tasks.core import ACTION_SIZE, OBS_SIZE, BatchedTask, Ended
from envs.tasks.episode_stats import EpisodeStatsChannel
from envs.tasks.family import Core, Family

BEHAVIOR_SPEC = BehaviorSpec(
    observation_specs=[
        ObservationSpec(
            shape=(OBS_SIZE,),
            dimension_property=(DimensionProperty.NONE,),
            observation_type=ObservationType.DEFAULT,
            name=f"VectorSensor_size{OBS_SIZE}",
        )
    ],
    action_spec=ActionSpec.create_continuous(ACTION_SIZE),
)


class ActionError(UnityActionException, ValueError):
    """Actions (or a behavior name) that the environment cannot take."""


class AgentIdError(IndexError, ValueError):
    """An agent id that did not request a decision."""


def _frozen(array: np.ndarray) -> np.ndarray:
    """`array`, read-only, so that it can be shared by every step's results."""
    array.flags.writeable = False
    return array


class InProcessEnv(BaseEnv):
    """What the BaseEnv of a built-in task and of a built-in game share: checked arguments,
    the core, its stats channel and parameters, and Unity's closed-environment behaviour."""

    _specs: BehaviorMapping

    def __init__(
        self, family: Family, num_areas: int, seed: int, params: Mapping[str, object] | None
    ) -> None:
        if (
            isinstance(num_areas, bool)
            or not isinstance(num_areas, int | np.integer)
            or num_areas < 1
        ):
            raise ValueError(f"num_areas must be a positive int, got {num_areas!r}")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.family = family
        self.num_areas = int(num_areas)
        self.stats_channel = EpisodeStatsChannel()
        self._core: Core = family.core_type(
            family.validate(params or {}), self.num_areas, int(seed), self.stats_channel.record
        )
        self._loaded = True

    @property
    def behavior_specs(self) -> BehaviorMapping:
        """The behaviors and their spec (identical for every built-in family)."""
        return self._specs

    @property
    def parameters(self) -> dict[str, float]:
        """The parameter values that the next episodes use."""
        return self._core.params.as_dict()

    def set_parameters(self, **params: float) -> None:
        """Change parameters (validated); each area uses them from its next episode on."""
        self._core.set_params(self.family.validate(params, self._core.params))

    def close(self) -> None:
        """Release the environment; later steps raise like a closed UnityEnvironment."""
        self._check_loaded()
        self._loaded = False

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise UnityEnvironmentException("No Unity environment is loaded.")


class TaskEnv(InProcessEnv):
    """A built-in task (all its areas in-process) behind the mlagents_envs BaseEnv API."""

    def __init__(
        self,
        family: Family,
        *,
        num_areas: int = 1,
        seed: int = 0,
        params: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(family, num_areas, seed, params)
        n = self.num_areas
        core = self._core
        if not isinstance(core, BatchedTask):
            raise ValueError(f"{family.name} is a game of teams: make it with envs.make")
        self._core: BatchedTask = core
        self._specs = BehaviorMapping({BEHAVIOR_NAME: BEHAVIOR_SPEC})
        self._action = np.zeros((n, ACTION_SIZE), np.float32)
        self._zeros = _frozen(np.zeros((n, ACTION_SIZE), np.float32))
        self._acted = False
        self._ids = _frozen(np.arange(n, dtype=np.int32))
        self._group_id = _frozen(np.zeros(n, np.int32))
        self._group_reward = _frozen(np.zeros(n, np.float32))
        empty = TerminalSteps.empty(BEHAVIOR_SPEC)
        for array in (
            *empty.obs,
            empty.reward,
            empty.interrupted,
            empty.agent_id,
            empty.group_id,
            empty.group_reward,
        ):
            _frozen(array)
        self._no_terminal = empty
        self.reset()

    @property
    def core(self) -> BatchedTask:
        """The batched task underneath (its state arrays are the areas' state)."""
        return self._core

    def reset(self) -> None:
        """Start new episodes in all areas at once, with the current parameters."""
        self._check_loaded()
        self._publish(self._core.reset(), np.zeros(self.num_areas, np.float32), None)

    def step(self) -> None:
        """Move every area one decision forward (zero actions for agents given none)."""
        self._check_loaded()
        action = self._action if self._acted else self._zeros
        self._acted = False
        self._publish(*self._core.step(action))

    def adopt(self, obs: np.ndarray, reward: np.ndarray, ended: Ended | None) -> None:
        """Take a step of these areas computed elsewhere (a core stack) as the last step's."""
        self._publish(obs, reward, ended)

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        """The decision and terminal steps of the last step (or reset)."""
        self._check_behavior(behavior_name)
        return self._steps

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        """Actions of all agents, in the order of the last DecisionSteps, for the next step."""
        self._check_behavior(behavior_name)
        self._take(action, self.num_areas, self._action)
        self._acted = True

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        """The action of one agent for the next step (others keep theirs, or zero)."""
        self._check_behavior(behavior_name)
        if (
            isinstance(agent_id, bool)
            or not isinstance(agent_id, int | np.integer)
            or not 0 <= agent_id < self.num_areas
        ):
            raise AgentIdError(
                f"agent_id {agent_id!r} did not request a decision at the "
                f"previous step (agent ids are 0..{self.num_areas - 1})"
            )
        if not self._acted:
            self._action.fill(0.0)
            self._acted = True
        self._take(action, 1, self._action[int(agent_id)][None])

    def _take(self, action: ActionTuple, num_agents: int, out: np.ndarray) -> None:
        """Validate like ActionSpec._validate_action, then clip the values into `out`."""
        if not isinstance(action, _ActionTupleBase):
            raise ActionError(
                f"actions for {BEHAVIOR_NAME} must be an ActionTuple, got {type(action).__name__}"
            )
        moves, discrete = action.continuous, action.discrete
        if not isinstance(moves, np.ndarray) or moves.shape != (num_agents, ACTION_SIZE):
            shape = getattr(moves, "shape", None)
            raise ActionError(
                f"continuous actions for {BEHAVIOR_NAME} must have shape "
                f"({num_agents}, {ACTION_SIZE}), got {shape}"
            )
        if moves.dtype != np.float32:
            raise ActionError(
                f"continuous actions for {BEHAVIOR_NAME} must be float32, got {moves.dtype}"
            )
        if discrete is not None and discrete.shape != (num_agents, 0):
            raise ActionError(
                f"discrete actions for {BEHAVIOR_NAME} must have shape "
                f"({num_agents}, 0), got {discrete.shape}"
            )
        if np.isnan(moves).any():
            raise ActionError(f"continuous actions for {BEHAVIOR_NAME} contain NaN")
        np.minimum(moves, 1.0, out=out)
        np.maximum(out, -1.0, out=out)

    def _publish(self, obs: np.ndarray, reward: np.ndarray, ended: Ended | None) -> None:
        """Wrap one step's arrays in the real mlagents_envs step types."""
        decisions = DecisionSteps(
            [obs], reward, self._ids, None, self._group_id, self._group_reward
        )
        if ended is None:
            self._steps = (decisions, self._no_terminal)
            return
        k = len(ended.agent_id)
        terminals = TerminalSteps(
            [ended.obs],
            ended.reward,
            ended.interrupted,
            ended.agent_id,
            self._group_id[:k],
            self._group_reward[:k],
        )
        self._steps = (decisions, terminals)

    def _check_behavior(self, behavior_name: str) -> None:
        if behavior_name != BEHAVIOR_NAME:
            raise ActionError(
                f"unknown behavior {behavior_name!r} (this environment has {BEHAVIOR_NAME!r})"
            )
