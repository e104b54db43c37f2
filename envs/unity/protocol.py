"""Wire format of the ML-Agents messages a build sends, encoded for all agents at once.

A Unity build answers every ``Exchange`` with one ``AgentInfoProto`` per agent. Building
those with the protobuf API costs a few microseconds per agent; here they are written as
bytes with numpy instead: every agent's record is one row of a byte matrix whose id-dependent
bytes (the id and record-length varints) are written once per set of agent ids, so a step
only copies rewards, flags and observations into their columns (varints shorter than their
reserved columns are dropped by a mask). The bytes parse to exactly the messages the
protobuf API builds (``tests/test_server.py`` checks that). Actions come back the same way:
the trainer's ``ListAgentActionProto`` is read with one reshape when it has the fixed layout
mlagents_envs writes.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Iterable, Sequence

import numpy as np
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.communicator_objects.brain_parameters_pb2 import BrainParametersProto
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_input_pb2 import UnityRLInputProto

_VARINT, _FIXED32, _LEN = 0, 5, 2


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    """Key of a protobuf field."""
    return varint(number << 3 | wire_type)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (message, bytes, string or packed list)."""
    return tag(number, _LEN) + varint(len(payload)) + payload


def _packed_varints(number: int, values: Sequence[int]) -> bytes:
    return field(number, b"".join(varint(v) for v in values)) if values else b""


_VARINT_LIMITS = np.array([1 << 7, 1 << 14, 1 << 21, 1 << 28, 1 << 35], dtype=np.int64)


def _varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes each non-negative value takes as a varint."""
    return np.searchsorted(_VARINT_LIMITS, values, side="right") + 1


def _varint_bytes(values: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """(n, width) varint bytes of values; bytes past a value's length are to be dropped."""
    k = np.arange(width)
    groups = (values[:, None] >> (7 * k)) & 0x7F
    return (groups | ((k < lengths[:, None] - 1) << 7)).astype(np.uint8)


class _Layout:
    """Byte columns of one agent record when its varints take the given widths."""

    def __init__(self, obs_parts: Sequence[tuple[bytes, int, bytes]], len_w: int, id_w: int):
        row = bytearray(tag(1, _LEN) + bytes(len_w) + tag(7, _FIXED32) + bytes(4))
        self.length = slice(1, 1 + len_w)
        self.reward = slice(len(row) - 4, len(row))
        row += tag(8, _VARINT) + b"\0" + tag(9, _VARINT) + b"\0" + tag(10, _VARINT)
        self.done, self.max_step = len(row) - 4, len(row) - 2
        self.id = slice(len(row), len(row) + id_w)
        row += bytes(id_w)
        self.obs = []
        for head, size, tail in obs_parts:
            row += head
            self.obs.append(slice(len(row), len(row) + 4 * size))
            row += bytes(4 * size) + tail
        self.template = np.frombuffer(bytes(row), dtype=np.uint8)


class AgentInfoEncoder:
    """Serializes a behavior's agents as the repeated ``AgentInfoProto`` field of a list."""

    def __init__(self, spec: BehaviorSpec) -> None:
        self._obs_parts: list[tuple[bytes, int, bytes]] = []
        for obs in spec.observation_specs:
            size = int(np.prod(obs.shape))
            floats = tag(1, _LEN) + varint(4 * size)  # FloatData.data header; the floats follow
            prefix = _packed_varints(1, obs.shape) + tag(4, _LEN) + varint(len(floats) + 4 * size)
            suffix = _packed_varints(6, [int(d.value) for d in obs.dimension_property])
            if obs.observation_type.value:
                suffix += tag(7, _VARINT) + varint(obs.observation_type.value)
            if obs.name:
                suffix += field(8, obs.name.encode())
            body = len(prefix) + len(floats) + 4 * size + len(suffix)
            self._obs_parts.append((tag(13, _LEN) + varint(body) + prefix + floats, size, suffix))
        self._fixed = 5 + 2 + 2 + 1 + sum(len(p) + 4 * s + len(x) for p, s, x in self._obs_parts)
        self._layouts: dict[tuple[int, int], _Layout] = {}
        self._rows: dict[bytes, tuple[_Layout, np.ndarray, np.ndarray | None]] = {}

    def encode(
        self,
        obs: Sequence[np.ndarray],
        reward: np.ndarray,
        done: np.ndarray,
        max_step: np.ndarray,
        agent_id: np.ndarray,
    ) -> bytes:
        """Bytes of ``ListAgentInfoProto`` for these agents (each row one agent)."""
        n = len(agent_id)
        if n == 0:
            return b""
        key = np.asarray(agent_id).tobytes()
        cached = self._rows.pop(key, None)  # agents keep their ids: a hit, step after step
        if cached is None:
            cached = self._id_rows(np.asarray(agent_id, dtype=np.int64))
            if len(self._rows) >= 4:
                del self._rows[next(iter(self._rows))]  # the least recently used
        self._rows[key] = cached
        layout, template, used = cached
        rows = template.copy()
        rows[:, layout.reward] = np.asarray(reward, dtype="<f4").reshape(n, 1).view(np.uint8)
        rows[:, layout.done] = done
        rows[:, layout.max_step] = max_step
        for column, (_, size, _), values in zip(layout.obs, self._obs_parts, obs, strict=True):
            rows[:, column] = np.asarray(values, dtype="<f4").reshape(n, size).view(np.uint8)
        return rows.tobytes() if used is None else rows[used].tobytes()

    def _id_rows(self, ids: np.ndarray) -> tuple[_Layout, np.ndarray, np.ndarray | None]:
        """Layout, rows with every id-dependent byte written, and the bytes in use (None: all)."""
        if ids.min() < 0:
            raise ValueError("agent ids must be non-negative")
        id_len = _varint_lengths(ids)
        length = self._fixed + id_len
        len_len = _varint_lengths(length)
        widths = int(len_len.max()), int(id_len.max())
        if widths not in self._layouts:
            self._layouts[widths] = _Layout(self._obs_parts, *widths)
        layout = self._layouts[widths]
        rows = np.tile(layout.template, (len(ids), 1))
        rows[:, layout.length] = _varint_bytes(length, len_len, widths[0])
        rows[:, layout.id] = _varint_bytes(ids, id_len, widths[1])
        if id_len.min() == widths[1] and len_len.min() == widths[0]:
            return layout, rows, None
        used = np.ones(rows.shape, dtype=bool)  # drop the unused bytes of shorter varints
        used[:, layout.length] = np.arange(widths[0]) < len_len[:, None]
        used[:, layout.id] = np.arange(widths[1]) < id_len[:, None]
        return layout, rows, used

    def encode_steps(self, decision: DecisionSteps, terminal: TerminalSteps) -> bytes:
        """One step's agents: the terminal ones (``done``), then those requesting decisions."""
        n_t, n_d = len(terminal), len(decision)
        ended = (
            self.encode(
                terminal.obs,
                terminal.reward,
                np.ones(n_t, bool),
                terminal.interrupted,
                terminal.agent_id,
            )
            if n_t
            else b""
        )
        return ended + self.encode(
            decision.obs,
            decision.reward,
            np.zeros(n_d, bool),
            np.zeros(n_d, bool),
            decision.agent_id,
        )


@functools.lru_cache(maxsize=8)
def _action_record(size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Fixed bytes of one AgentActionProto record as mlagents_envs writes it, and its width."""
    payload = 4 * size
    head = tag(1, _LEN) + varint(2 * payload + 4) + tag(1, _LEN) + varint(payload)
    middle = tag(6, _LEN) + varint(payload)
    width = len(head) + len(middle) + 2 * payload
    return np.frombuffer(head, dtype=np.uint8), np.frombuffer(middle, dtype=np.uint8), width


def continuous_actions(list_bytes: bytes, n: int, size: int) -> np.ndarray | None:
    """(n, size) continuous actions out of ``ListAgentActionProto`` bytes, or None.

    Reads the layout mlagents_envs writes (each record: ``vector_actions_deprecated`` then
    ``continuous_actions``, nothing else) with one reshape; None means: parse it field by field.
    """
    if n == 0 or not 0 < size < 16:
        return None
    head, middle, width = _action_record(size)
    if len(list_bytes) != n * width:
        return None
    rows = np.frombuffer(list_bytes, dtype=np.uint8).reshape(n, width)
    start = len(head) + 4 * size
    if not (
        (rows[:, : len(head)] == head).all()
        and (rows[:, start : start + len(middle)] == middle).all()
    ):
        return None
    return np.ascontiguousarray(rows[:, width - 4 * size :]).view("<f4").astype(np.float32)


def split_side_channel(data: bytes) -> list[tuple[uuid.UUID, bytes]]:
    """Side-channel bytes as (channel id, message) pairs, in the order they were packed."""
    messages, offset = [], 0
    while offset < len(data):
        if offset + 20 > len(data):
            raise ValueError("truncated side-channel header")
        channel = uuid.UUID(bytes_le=bytes(data[offset : offset + 16]))
        (size,) = struct.unpack_from("<i", data, offset + 16)
        offset += 20
        if size < 0 or offset + size > len(data):
            raise ValueError(f"truncated side-channel message on channel {channel}")
        messages.append((channel, bytes(data[offset : offset + size])))
        offset += size
    return messages


def join_side_channel(messages: Iterable[tuple[uuid.UUID, bytes]]) -> bytes:
    """Pack (channel id, message) pairs as ``SideChannelManager`` reads them."""
    return b"".join(c.bytes_le + struct.pack("<i", len(m)) + m for c, m in messages)


API_VERSION = "1.5.0"
PACKAGE_VERSION = "2.2.1-exp.1"  # the com.unity.ml-agents release paired with mlagents-envs 0.28
OK = field(1, tag(1, _VARINT) + varint(200))  # UnityMessageProto.header {status: 200}


def academy_message(name: str, log_path: str) -> bytes:
    """A player's first message: its ``UnityRLInitializationOutputProto``."""
    message = UnityMessageProto()
    message.header.status = 200
    out = message.unity_output.rl_initialization_output
    out.name, out.log_path = name, log_path
    out.communication_version, out.package_version = API_VERSION, PACKAGE_VERSION
    caps = out.capabilities
    caps.baseRLCapabilities = caps.concatenatedPngObservations = True
    caps.compressedChannelMapping = caps.hybridActions = caps.trainingAnalytics = True
    caps.variableLengthObservation = caps.multiAgentGroups = True
    return message.SerializeToString()


def brain_parameters(name: str, spec: BehaviorSpec) -> bytes:
    """``BrainParametersProto`` bytes announcing a behavior and its action spec."""
    brain = BrainParametersProto(brain_name=name, is_training=True)
    brain.action_spec.num_continuous_actions = spec.action_spec.continuous_size
    brain.action_spec.num_discrete_actions = spec.action_spec.discrete_size
    brain.action_spec.discrete_branch_sizes.extend(spec.action_spec.discrete_branches)
    return brain.SerializeToString()


def output_message(
    agent_infos: dict[str, bytes], side_channel: bytes, brains: Sequence[bytes] = ()
) -> bytes:
    """A step's ``UnityMessageProto``: agent infos per behavior, side channel, new brains."""
    entries = b"".join(
        field(2, field(1, name.encode()) + field(2, infos)) for name, infos in agent_infos.items()
    )
    output = field(1, entries + (field(3, side_channel) if side_channel else b""))
    if brains:
        output += field(2, b"".join(field(5, brain) for brain in brains))
    return OK + field(2, output)


def actions(value: UnityRLInputProto.ListAgentActionProto, n: int, spec: ActionSpec) -> ActionTuple:
    """The ``ActionTuple`` of n agents out of the trainer's actions for one behavior."""
    if len(value.value) != n:
        raise ValueError(f"trainer sent {len(value.value)} actions for {n} agents")
    continuous = discrete = None
    if spec.continuous_size and not spec.discrete_size:
        continuous = continuous_actions(value.SerializeToString(), n, spec.continuous_size)
    if continuous is None and spec.continuous_size:
        continuous = np.array([list(a.continuous_actions) for a in value.value], np.float32)
    if spec.discrete_size:
        discrete = np.array([list(a.discrete_actions) for a in value.value], np.int32)
    return ActionTuple(continuous=continuous, discrete=discrete)
