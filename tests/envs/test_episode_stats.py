"""envs/tasks/episode_stats.py: stats through a real StatsSideChannel, in the real format."""

from __future__ import annotations

import numpy as np
from mlagents_envs.side_channel.outgoing_message import OutgoingMessage
from mlagents_envs.side_channel.stats_side_channel import (
    StatsAggregationMethod,
    StatsSideChannel,
)

import envs
from envs.tasks.episode_stats import EPISODE_LENGTH, SUCCESS, EpisodeStatsChannel, episode_messages

AVERAGE = StatsAggregationMethod.AVERAGE


def test_messages_are_byte_for_byte_what_outgoing_message_writes() -> None:
    expected, offsets = bytearray(), []
    for won, length in ((1.0, 12.0), (0.0, 100.0)):
        for key, value in ((SUCCESS, won), (EPISODE_LENGTH, length)):
            message = OutgoingMessage()
            message.write_string(key)
            message.write_float32(value)
            message.write_int32(AVERAGE.value)
            offsets.append(len(expected))
            expected += message.buffer
    buffer, starts = episode_messages(np.array([True, False]), np.array([12, 100], np.float32))
    assert buffer == bytes(expected) and starts == offsets


def test_recorded_episodes_are_read_as_stats_and_reset() -> None:
    channel = EpisodeStatsChannel()
    assert isinstance(channel, StatsSideChannel)
    channel.record(np.array([True]), np.array([7], np.float32))
    channel.record(np.array([False, True]), np.array([100, 30], np.float32))
    stats = channel.get_and_reset_stats()
    assert stats[SUCCESS] == [(1.0, AVERAGE), (0.0, AVERAGE), (1.0, AVERAGE)]
    assert stats[EPISODE_LENGTH] == [(7.0, AVERAGE), (100.0, AVERAGE), (30.0, AVERAGE)]
    assert channel.get_and_reset_stats() == {}


def test_env_reports_success_and_length_per_finished_episode() -> None:
    env = envs.make("FindTarget", num_areas=3, max_step=20)
    core = env.core
    for _ in range(4):
        env.step()
    core.pos[:, 2] = core.objective[:, 2]
    env.step()
    for _ in range(15):
        env.step()
    stats = env.stats_channel.get_and_reset_stats()
    assert sorted(stats[SUCCESS]) == [(0.0, AVERAGE), (0.0, AVERAGE), (1.0, AVERAGE)]
    assert sorted(v for v, _ in stats[EPISODE_LENGTH]) == [5.0, 20.0, 20.0]
