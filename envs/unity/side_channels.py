"""Side channels a player speaks: environment parameters and engine settings in, stats out.

Framing is ``SideChannelManager``'s; message layouts are those of mlagents_envs'
``EnvironmentParametersChannel``, ``EngineConfigurationChannel`` and ``StatsSideChannel``;
sampler semantics follow Unity's ``EnvironmentParameters`` (every read of a sampled parameter
draws a new value).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence

import numpy as np
from mlagents_envs.side_channel import IncomingMessage, OutgoingMessage
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

STATS = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")
ENV_PARAMETERS = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
ENGINE = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
TRAINING_ANALYTICS = uuid.UUID("b664a4a9-d86f-5a5f-95cb-e8353a7e8356")
_FLOAT, _SAMPLER = 0, 1
_UNIFORM, _GAUSSIAN, _MULTIRANGE = 0, 1, 2
_ENGINE_FIELDS = {
    0: ("width", "height"),
    1: ("quality_level",),
    2: ("time_scale",),
    3: ("target_frame_rate",),
    4: ("capture_frame_rate",),
}


def unpack(data: bytes) -> list[tuple[uuid.UUID, bytes]]:
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


def pack(messages: Iterable[tuple[uuid.UUID, bytes]]) -> bytes:
    """(channel id, message) pairs as ``SideChannelManager`` reads them."""
    return b"".join(c.bytes_le + struct.pack("<i", len(m)) + m for c, m in messages)


class Sampler:
    """A parameter sampler as Unity's ``EnvironmentParametersChannel`` defines it."""

    def __init__(self, kind: int, values: Sequence[float], seed: int) -> None:
        if kind not in (_UNIFORM, _GAUSSIAN, _MULTIRANGE):
            raise ValueError(f"unknown sampler type {kind}")
        if kind == _MULTIRANGE and (not values or len(values) % 2):
            raise ValueError("multirange sampler needs (min, max) pairs")
        self.kind, self.values = kind, [float(v) for v in values]
        self.rng = np.random.default_rng(seed)

    def __call__(self) -> float:
        """Draw one value."""
        if self.kind == _UNIFORM:
            return float(self.rng.uniform(self.values[0], self.values[1]))
        if self.kind == _GAUSSIAN:
            return float(self.rng.normal(self.values[0], self.values[1]))
        low, high = np.array(self.values[0::2]), np.array(self.values[1::2])
        i = self.rng.choice(len(low), p=(high - low) / (high - low).sum())  # by interval length
        return float(self.rng.uniform(low[i], high[i]))

    def __repr__(self) -> str:
        name = {_UNIFORM: "uniform", _GAUSSIAN: "gaussian", _MULTIRANGE: "multirangeuniform"}
        return f"{name[self.kind]}{tuple(self.values)}"


class Parameters:
    """Environment parameters a build received: fixed values and per-episode samplers."""

    def __init__(self) -> None:
        self.samplers: dict[str, Sampler] = {}

    def receive(self, payload: bytes) -> tuple[str, dict[str, float]]:
        """Read one message; a description and the values to apply from the next episodes."""
        msg = IncomingMessage(payload)
        key, kind = msg.read_string(), msg.read_int32()
        if kind == _FLOAT:
            self.samplers.pop(key, None)
            value = msg.read_float32()
            return f"{key}={value}", {key: value}
        if kind != _SAMPLER:
            raise ValueError(f"unknown environment parameter type {kind} for {key}")
        seed, sampler_kind = msg.read_int32(), msg.read_int32()
        if sampler_kind == _MULTIRANGE:
            values = msg.read_float32_list()
        else:
            values = [msg.read_float32(), msg.read_float32()]
        sampler = self.samplers[key] = Sampler(sampler_kind, values, seed)
        return f"{key}~{sampler!r} seed {seed}", {}

    def draw(self) -> dict[str, float]:
        """A fresh value of every sampled parameter."""
        return {key: sampler() for key, sampler in self.samplers.items()}


def engine_settings(payload: bytes) -> dict[str, float]:
    """An ``EngineConfigurationChannel`` message as {setting: value}."""
    msg = IncomingMessage(payload)
    names = _ENGINE_FIELDS.get(msg.read_int32(), ())
    read = {"time_scale": msg.read_float32}
    return {name: read.get(name, msg.read_int32)() for name in names}


def stats_messages(stats: StatsSideChannel) -> list[tuple[uuid.UUID, bytes]]:
    """The stats gathered since the last call, as ``StatsSideChannel`` messages."""
    messages = []
    for key, values in stats.get_and_reset_stats().items():
        for value, aggregation in values:
            msg = OutgoingMessage()
            msg.write_string(key)
            msg.write_float32(value)
            msg.write_int32(aggregation.value)
            messages.append((STATS, bytes(msg.buffer)))
    return messages
