"""Several environments of one behavior presented as one: the union of their agents."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlagents_envs.base_env import (
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    BehaviorName,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.side_channel.stats_side_channel import EnvironmentStats, StatsSideChannel

from envs.interface import TaskEnvironment


class MergedStats(StatsSideChannel):
    """A stats channel that drains several others (one per child environment)."""

    def __init__(self, channels: Sequence[StatsSideChannel]) -> None:
        super().__init__()
        self.channels = list(channels)

    def get_and_reset_stats(self) -> EnvironmentStats:
        """Every child's stats, concatenated per key."""
        merged: dict[str, list] = {}
        for channel in self.channels:
            for key, values in channel.get_and_reset_stats().items():
                merged.setdefault(key, []).extend(values)
        return merged


class ConcatEnv(BaseEnv):
    """Steps child environments together; agent ids are offset so they stay unique.

    Child i's ids are shifted by the agents before it, or by i * id_stride when given (as the
    unity backend numbers its workers' agents).
    """

    def __init__(self, children: Sequence[TaskEnvironment], id_stride: int | None = None) -> None:
        if not children:
            raise ValueError("ConcatEnv needs at least one environment")
        specs = [dict(child.behavior_specs) for child in children]
        if any(spec != specs[0] for spec in specs[1:]):
            raise ValueError("ConcatEnv: child environments have different behavior specs")
        self.children = list(children)
        self.id_stride = id_stride
        self._specs = specs[0]
        self._sizes: dict[str, list[int]] = {}
        self._offsets: dict[str, list[int]] = {}
        self.stats_channel = MergedStats([c.stats_channel for c in children])

    @property
    def behavior_specs(self) -> BehaviorMapping:
        """The children's common specs."""
        return BehaviorMapping(self._specs)

    def step(self) -> None:
        """Step every child."""
        for child in self.children:
            child.step()

    def reset(self) -> None:
        """Reset every child."""
        for child in self.children:
            child.reset()

    def close(self) -> None:
        """Close every child."""
        for child in self.children:
            child.close()

    def set_parameters(self, **params: float) -> None:
        """Pass environment parameters to every child."""
        for child in self.children:
            child.set_parameters(**params)  # type: ignore[attr-defined]

    def get_steps(self, behavior_name: BehaviorName) -> tuple[DecisionSteps, TerminalSteps]:
        """Concatenated decision and terminal steps, ids offset per child."""
        parts = [child.get_steps(behavior_name) for child in self.children]
        sizes = [len(d) for d, _ in parts]
        offsets = (
            [i * self.id_stride for i in range(len(sizes))]
            if self.id_stride
            else np.cumsum([0, *sizes])[:-1].tolist()
        )
        self._sizes[behavior_name] = sizes
        self._offsets[behavior_name] = offsets
        decisions, terminals = [d for d, _ in parts], [t for _, t in parts]
        return (
            concat_decisions(decisions, offset_ids(decisions, offsets)),
            concat_terminals(terminals, offset_ids(terminals, offsets)),
        )

    def set_actions(self, behavior_name: BehaviorName, action: ActionTuple) -> None:
        """Split the actions by child, in agent order of the last get_steps."""
        sizes = self._sizes.get(behavior_name)
        if sizes is None:
            raise ValueError("ConcatEnv.set_actions called before get_steps")
        total = sum(sizes)
        if action.continuous.shape[0] != total:
            raise ValueError(
                f"ConcatEnv: expected actions for {total} agents, got {action.continuous.shape[0]}"
            )
        start = 0
        for child, size in zip(self.children, sizes, strict=True):
            child.set_actions(
                behavior_name,
                ActionTuple(
                    continuous=action.continuous[start : start + size],
                    discrete=action.discrete[start : start + size],
                ),
            )
            start += size

    def set_action_for_agent(
        self, behavior_name: BehaviorName, agent_id: int, action: ActionTuple
    ) -> None:
        """Route one agent's action to the child that owns it."""
        offsets = self._offsets.get(behavior_name)
        if offsets is None:
            raise ValueError("ConcatEnv.set_action_for_agent called before get_steps")
        child = int(np.searchsorted(offsets, agent_id, side="right")) - 1
        self.children[child].set_action_for_agent(behavior_name, agent_id - offsets[child], action)


def offset_ids(
    parts: Sequence[DecisionSteps | TerminalSteps], offsets: Sequence[int]
) -> np.ndarray:
    """The parts' agent ids, each part's shifted by its offset, concatenated."""
    ids = [p.agent_id.astype(np.int64) + o for p, o in zip(parts, offsets, strict=True)]
    return np.concatenate(ids).astype(np.int32)


def concat_decisions(parts: Sequence[DecisionSteps], agent_ids: np.ndarray) -> DecisionSteps:
    """Several DecisionSteps of one behavior as one, with the given agent ids."""
    cat = np.concatenate
    masks = None
    if parts[0].action_mask is not None:
        masks = [cat([p.action_mask[i] for p in parts]) for i in range(len(parts[0].action_mask))]
    return DecisionSteps(
        [cat([p.obs[i] for p in parts]) for i in range(len(parts[0].obs))],
        cat([p.reward for p in parts]),
        agent_ids,
        masks,
        cat([p.group_id for p in parts]),
        cat([p.group_reward for p in parts]),
    )


def concat_terminals(parts: Sequence[TerminalSteps], agent_ids: np.ndarray) -> TerminalSteps:
    """Several TerminalSteps of one behavior as one, with the given agent ids."""
    cat = np.concatenate
    return TerminalSteps(
        [cat([p.obs[i] for p in parts]) for i in range(len(parts[0].obs))],
        cat([p.reward for p in parts]),
        cat([p.interrupted for p in parts]),
        agent_ids,
        cat([p.group_id for p in parts]),
        cat([p.group_reward for p in parts]),
    )
