"""mlagents_envs BaseEnv over a game of two teams, named and numbered as Unity does.

The teams are two behaviors of one brain, `Brain?team=0` and `Brain?team=1`, each with the
other families' BehaviorSpec. Team t's agent in area i has agent id t * num_areas + i (ids are
unique across behaviors, as in Unity). Every agent decides every step; a game's end puts both
teams' agents in that step's TerminalSteps and, reset, in its DecisionSteps with reward 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from mlagents_envs.base_env import (
    ActionTuple,
    BehaviorMapping,
    DecisionSteps,
    TerminalSteps,
)

from envs.constants import BEHAVIOR_NAME
from envs.tasks.adapter import BEHAVIOR_SPEC, ActionError, AgentIdError, InProcessEnv
from envs.tasks.core import ACTION_SIZE
from envs.tasks.family import Family
from envs.tasks.sumo import TEAMS, Games, SumoCore

TEAM_BEHAVIORS = tuple(f"{BEHAVIOR_NAME}?team={t}" for t in range(TEAMS))
"""The behavior names of the teams, as Unity names a behavior with a team id."""


def team_of(behavior_name: str) -> int | None:
    """The team id in a behavior name (`Brain?team=1` -> 1), None without one."""
    _, _, query = behavior_name.partition("?")
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "team" and value.lstrip("-").isdigit():
            return int(value)
    return None


class TeamTaskEnv(InProcessEnv):
    """A built-in game (all its areas in-process) behind the mlagents_envs BaseEnv API."""

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
        if not isinstance(core, SumoCore):
            raise ValueError(f"{family.name} is not a game of teams")
        self._core: SumoCore = core
        self._specs = BehaviorMapping(dict.fromkeys(TEAM_BEHAVIORS, BEHAVIOR_SPEC))
        self._action = np.zeros((TEAMS, n, ACTION_SIZE), np.float32)
        self._ids = [np.arange(t * n, (t + 1) * n, dtype=np.int32) for t in range(TEAMS)]
        self._zeros = np.zeros(n, np.int32), np.zeros(n, np.float32)
        self.reset()

    @property
    def core(self) -> SumoCore:
        """The batched game underneath."""
        return self._core

    def reset(self) -> None:
        """Start new games in all areas."""
        self._check_loaded()
        self._publish(self._core.reset(), np.zeros((TEAMS, self.num_areas), np.float32), None)

    def step(self) -> None:
        """Move every area one decision forward (zero moves for a team given no actions)."""
        self._check_loaded()
        action = self._action.copy()
        self._action.fill(0.0)
        self._publish(*self._core.step(action))

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        """A team's decision and terminal steps of the last step (or reset)."""
        return self._steps[self._team(behavior_name)]

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        """Actions of a team's agents, in the order of its last DecisionSteps."""
        self._take(behavior_name, action, self.num_areas, self._action[self._team(behavior_name)])

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        """The action of one agent of a team for the next step."""
        team, n = self._team(behavior_name), self.num_areas
        if isinstance(agent_id, bool) or not isinstance(agent_id, int | np.integer):
            raise AgentIdError(f"agent_id {agent_id!r} is not an agent id")
        row = int(agent_id) - team * n
        if not 0 <= row < n:
            raise AgentIdError(
                f"agent_id {agent_id!r} is not in {behavior_name} "
                f"(its agent ids are {team * n}..{team * n + n - 1})"
            )
        self._take(behavior_name, action, 1, self._action[team, row][None])

    def _team(self, behavior_name: str) -> int:
        if behavior_name not in self._specs:
            raise ActionError(
                f"unknown behavior {behavior_name!r} (this environment has "
                f"{', '.join(map(repr, TEAM_BEHAVIORS))})"
            )
        return TEAM_BEHAVIORS.index(behavior_name)

    def _take(self, name: str, action: ActionTuple, count: int, out: np.ndarray) -> None:
        """Validate as ActionSpec does, then clip the moves into `out`."""
        try:
            valid = BEHAVIOR_SPEC.action_spec._validate_action(action, count, name)
        except Exception as error:
            raise ActionError(str(error)) from None
        moves = valid.continuous
        if np.isnan(moves).any():
            raise ActionError(f"continuous actions for {name} contain NaN")
        np.clip(moves, -1.0, 1.0, out=out)

    def _publish(self, obs: np.ndarray, reward: np.ndarray, games: Games | None) -> None:
        """Each team's step wrapped in the real mlagents_envs step types."""
        group, group_reward = self._zeros
        steps = []
        for t in range(TEAMS):
            decisions = DecisionSteps([obs[t]], reward[t], self._ids[t], None, group, group_reward)
            if games is None:
                terminals = TerminalSteps.empty(BEHAVIOR_SPEC)
            else:
                k = len(games.agent_id)
                terminals = TerminalSteps(
                    [games.obs[t]],
                    games.reward[t],
                    games.interrupted,
                    games.agent_id + t * self.num_areas,
                    group[:k],
                    group_reward[:k],
                )
            steps.append((decisions, terminals))
        self._steps = steps
