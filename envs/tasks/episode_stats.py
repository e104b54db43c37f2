"""Episode statistics reported the way a Unity build reports them: a StatsSideChannel."""

from __future__ import annotations

import numpy as np
from mlagents_envs.side_channel.incoming_message import IncomingMessage
from mlagents_envs.side_channel.stats_side_channel import (
    EnvironmentStats,
    StatsAggregationMethod,
    StatsSideChannel,
)

SUCCESS = "Environment/Success"
EPISODE_LENGTH = "Environment/Episode Length"


def _message_dtype(key: str) -> np.dtype:
    """Layout of one stats message (what Unity's StatsRecorder sends) for a fixed key."""
    return np.dtype(
        [("key_len", "<i4"), ("key", f"S{len(key)}"), ("value", "<f4"), ("aggregation", "<i4")]
    )


class EpisodeStatsChannel(StatsSideChannel):
    """Per finished episode, Environment/Success (1 or 0) and Environment/Episode Length.

    The native tasks only collect arrays while stepping; they become side-channel messages,
    parsed by the channel's own on_message_received, when the stats are read.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    def record(self, success: np.ndarray, length: np.ndarray) -> None:
        """Note episodes that just ended: success flags and lengths in steps."""
        self._pending.append((success, length))

    def get_and_reset_stats(self) -> EnvironmentStats:
        """The stats since the last call (messages of episodes recorded so far included)."""
        self._deliver()
        return super().get_and_reset_stats()

    def _deliver(self) -> None:
        """Turn the recorded episodes into messages and receive them like a build's."""
        if not self._pending:
            return
        success = np.concatenate([s for s, _ in self._pending])
        length = np.concatenate([n for _, n in self._pending])
        self._pending.clear()
        buffer, offsets = episode_messages(success, length)
        for offset in offsets:
            self.on_message_received(IncomingMessage(buffer, offset))


def episode_messages(success: np.ndarray, length: np.ndarray) -> tuple[bytes, list[int]]:
    """Stats messages (success, then length, per episode) as one buffer and their offsets."""
    fields = [(SUCCESS, success), (EPISODE_LENGTH, length)]
    episode = np.dtype([(key, _message_dtype(key)) for key, _ in fields])
    messages = np.zeros(len(success), episode)
    for key, values in fields:
        messages[key]["key_len"] = len(key)
        messages[key]["key"] = key.encode("ascii")
        messages[key]["value"] = values
        messages[key]["aggregation"] = StatsAggregationMethod.AVERAGE.value
    second = _message_dtype(SUCCESS).itemsize
    starts = range(0, len(success) * episode.itemsize, episode.itemsize)
    return messages.tobytes(), [o for start in starts for o in (start, start + second)]
