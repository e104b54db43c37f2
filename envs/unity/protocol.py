"""The ML-Agents messages a build exchanges with the trainer, built with their protobuf classes.

A build answers every ``Exchange`` with one ``AgentInfoProto`` per agent. The agents asking
for decisions are the same ones step after step, so their messages are built once and then
rewritten in place (reward, observations); a step only adds the agents whose episode ended.
Observations go in and out of protobuf as whole rows (``tolist``, ``extend``), never element
by element in Python.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.internal.containers import (
    RepeatedCompositeFieldContainer,
    RepeatedScalarFieldContainer,
)
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
from mlagents_envs.communicator_objects.brain_parameters_pb2 import BrainParametersProto
from mlagents_envs.communicator_objects.observation_pb2 import ObservationProto
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_input_pb2 import UnityRLInputProto
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto

API_VERSION = "1.5.0"
PACKAGE_VERSION = "2.2.1-exp.1"  # the com.unity.ml-agents release paired with mlagents-envs 0.28


def ok() -> UnityMessageProto:
    """An empty message with status 200."""
    message = UnityMessageProto()
    message.header.status = 200
    return message


def academy_message(name: str, log_path: str) -> UnityMessageProto:
    """A player's first message: its ``UnityRLInitializationOutputProto``."""
    message = ok()
    out = message.unity_output.rl_initialization_output
    out.name, out.log_path = name, log_path
    out.communication_version, out.package_version = API_VERSION, PACKAGE_VERSION
    caps = out.capabilities
    caps.baseRLCapabilities = caps.concatenatedPngObservations = True
    caps.compressedChannelMapping = caps.hybridActions = caps.trainingAnalytics = True
    caps.variableLengthObservation = caps.multiAgentGroups = True
    return message


def brain_parameters(name: str, spec: BehaviorSpec) -> BrainParametersProto:
    """The ``BrainParametersProto`` announcing a behavior and its action spec."""
    brain = BrainParametersProto(brain_name=name, is_training=True)
    brain.action_spec.num_continuous_actions = spec.action_spec.continuous_size
    brain.action_spec.num_discrete_actions = spec.action_spec.discrete_size
    brain.action_spec.discrete_branch_sizes.extend(spec.action_spec.discrete_branches)
    return brain


class AgentInfos:
    """Writes a behavior's agents into ``ListAgentInfoProto``: deciding ones, then terminal.

    Given the same target as the step before (the player keeps one output message), the
    deciding agents already stand in it: only their rewards and observations are rewritten,
    and last step's terminal agents are dropped, so nothing is copied (mlagents_envs tells
    the two kinds apart by ``done``, not by position).
    """

    def __init__(self, spec: BehaviorSpec) -> None:
        self.sizes = [int(np.prod(obs.shape)) for obs in spec.observation_specs]
        self.templates = [
            ObservationProto(
                shape=obs.shape,
                dimension_properties=[d.value for d in obs.dimension_property],
                observation_type=obs.observation_type.value,
                name=obs.name,
            )
            for obs in spec.observation_specs
        ]
        self.target: UnityRLOutputProto.ListAgentInfoProto | None = None
        self.deciding_ids = np.empty(0, np.int64)
        self.float_data: list[list[RepeatedScalarFieldContainer[float]]] = []

    def write(
        self,
        target: UnityRLOutputProto.ListAgentInfoProto,
        decision: DecisionSteps,
        terminal: TerminalSteps,
    ) -> None:
        """Make ``target`` hold one step's agents (whatever it held before)."""
        infos = target.value
        if target is self.target and np.array_equal(decision.agent_id, self.deciding_ids):
            del infos[len(self.deciding_ids) :]
            self._rewrite(decision)
        else:
            del infos[:]
            self._add(infos, decision, [False] * len(decision), done=False)
            self.target, self.deciding_ids = target, np.array(decision.agent_id, copy=True)
            self.float_data = [
                [info.observations[k].float_data.data for info in infos]
                for k in range(len(self.templates))
            ]
        self._add(infos, terminal, terminal.interrupted.tolist(), done=True)

    def _rows(self, steps: DecisionSteps | TerminalSteps) -> list[list[list[float]]]:
        """Each observation as a list of per-agent rows of Python floats."""
        n = len(steps)
        return [
            np.asarray(obs, np.float32).reshape(n, size).tolist()
            for obs, size in zip(steps.obs, self.sizes, strict=True)
        ]

    def _add(
        self,
        infos: RepeatedCompositeFieldContainer[AgentInfoProto],
        steps: DecisionSteps | TerminalSteps,
        max_step: list[bool],
        done: bool,
    ) -> None:
        """Append an ``AgentInfoProto`` for each agent of ``steps``."""
        if not len(steps):
            return
        add, templates = infos.add, self.templates
        ids, rewards = steps.agent_id.tolist(), steps.reward.tolist()
        for agent, reward, reached, *rows in zip(
            ids, rewards, max_step, *self._rows(steps), strict=True
        ):
            info = add(reward=reward, done=done, max_step_reached=reached, id=agent)
            for template, row in zip(templates, rows, strict=True):
                observation = info.observations.add()
                observation.CopyFrom(template)
                observation.float_data.data.extend(row)

    def _rewrite(self, decision: DecisionSteps) -> None:
        """Overwrite the rewards and observations of the same deciding agents."""
        assert self.target is not None
        for info, reward in zip(self.target.value, decision.reward.tolist(), strict=True):
            info.reward = reward
        for containers, rows in zip(self.float_data, self._rows(decision), strict=True):
            for data, row in zip(containers, rows, strict=True):
                data[:] = row


def actions(value: UnityRLInputProto.ListAgentActionProto, n: int, spec: ActionSpec) -> ActionTuple:
    """The ``ActionTuple`` of n agents out of the trainer's actions for one behavior."""
    if len(value.value) != n:
        raise ValueError(f"trainer sent {len(value.value)} actions for {n} agents")
    continuous = discrete = None
    if spec.continuous_size:
        rows = [action.continuous_actions[:] for action in value.value]
        continuous = np.array(rows, np.float32).reshape(n, spec.continuous_size)
    if spec.discrete_size:
        rows = [action.discrete_actions[:] for action in value.value]
        discrete = np.array(rows, np.int32).reshape(n, spec.discrete_size)
    return ActionTuple(continuous=continuous, discrete=discrete)
