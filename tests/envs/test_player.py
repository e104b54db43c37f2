"""The player side of the ML-Agents protocol: wire encoding, side channels, a whole session.

Sessions here run the player in a thread against a real ``UnityEnvironment`` (editor mode:
no executable), over a tiny task of the test's own, so the protocol is checked apart from
the built-in tasks (``tests/test_unity_backend.py`` runs the real builds).
"""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
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
)
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.rpc_utils import steps_from_proto
from mlagents_envs.side_channel import IncomingMessage
from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel
from mlagents_envs.side_channel.environment_parameters_channel import (
    EnvironmentParametersChannel,
)
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager
from mlagents_envs.side_channel.stats_side_channel import (
    StatsAggregationMethod,
    StatsSideChannel,
)

from envs.unity import http2, protocol, side_channels
from envs.unity import player as server

# mlagents_envs 0.28 compares versions with distutils' StrictVersion.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*")
VECTOR = ObservationSpec((10,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "vector")
GOAL = ObservationSpec((2, 3), (DimensionProperty.NONE,) * 2, ObservationType.GOAL_SIGNAL, "")
SPEC = BehaviorSpec([VECTOR], ActionSpec.create_continuous(2))


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


class ToyEnv(BaseEnv):
    """Areas whose observation decays towards the action; episodes last 3 + (area % 3) steps."""

    def __init__(self, num_areas: int = 1, seed: int = 0, gain: float = 1.0) -> None:
        self.n, self.rng = num_areas, np.random.default_rng(seed)
        self.gain = self.next_gain = gain
        self.stats_channel = StatsSideChannel()
        self.reset()

    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping({"Brain": SPEC})

    def set_parameters(self, **params: float) -> None:
        if set(params) - {"gain"}:
            raise ValueError(f"unknown parameters {set(params) - {'gain'}}")
        self.next_gain = params["gain"]

    def reset(self) -> None:
        self.gain = self.next_gain
        self.t = np.zeros(self.n, int)
        self.obs = self.rng.random((self.n, 10), dtype=np.float32) * np.float32(self.gain)
        self.action = np.zeros((self.n, 2), np.float32)
        self.ended = np.zeros(self.n, bool)
        self.last, self.reward = self.obs[:0], np.zeros(self.n, np.float32)

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        self.action = action.continuous

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        self.action[agent_id] = action.continuous[0]

    def step(self) -> None:
        self.t += 1
        self.reward = self.action.sum(axis=1, dtype=np.float32) * np.float32(self.gain)
        self.obs = self.obs * np.float32(0.5) + self.action[:, :1]
        self.ended = self.t >= 3 + np.arange(self.n) % 3
        self.last = self.obs[self.ended].copy()
        for length in self.t[self.ended]:
            self.stats_channel.stats["Environment/Episode Length"].append(
                (float(length), StatsAggregationMethod.AVERAGE)
            )
        self.t[self.ended] = 0
        self.gain = self.next_gain
        fresh = self.rng.random((int(self.ended.sum()), 10), dtype=np.float32)
        self.obs[self.ended] = fresh * np.float32(self.gain)

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        ids, k = np.arange(self.n, dtype=np.int32), int(self.ended.sum())
        reward = np.where(self.ended, 0, self.reward).astype(np.float32)
        decision = DecisionSteps(
            [self.obs.copy()],
            reward,
            ids,
            None,
            np.zeros(self.n, np.int32),
            np.zeros(self.n, np.float32),
        )
        terminal = TerminalSteps(
            [self.last],
            self.reward[self.ended],
            np.zeros(k, bool),
            ids[self.ended],
            np.zeros(k, np.int32),
            np.zeros(k, np.float32),
        )
        return decision, terminal

    def close(self) -> None:
        pass


def toy_factory(family: str, *, num_areas: int, seed: int, **params: float) -> ToyEnv:
    return ToyEnv(num_areas=num_areas, seed=seed, **params)


@pytest.mark.parametrize(
    "ids",
    [
        np.arange(64),
        np.arange(5) + 100,
        np.arange(300) + 16_000,
        np.array([0, 2**30, 2**31 - 1]),
        np.array([127, 128, 3]),
    ],
)
def test_agent_infos_parse_to_what_protobuf_builds(ids: np.ndarray) -> None:
    rng, n = np.random.default_rng(0), len(ids)
    spec = BehaviorSpec([VECTOR, GOAL], ActionSpec.create_continuous(2))
    vector, goal = rng.random((n, 10), np.float32), rng.random((n, 2, 3), np.float32)
    reward, done = rng.standard_normal(n).astype(np.float32), rng.random(n) < 0.3
    max_step = done & (rng.random(n) < 0.5)
    data = protocol.AgentInfoEncoder(spec).encode([vector, goal], reward, done, max_step, ids)
    expected = UnityRLOutputProto.ListAgentInfoProto()
    for i in range(n):
        info = expected.value.add(
            reward=reward[i], done=done[i], max_step_reached=max_step[i], id=ids[i]
        )
        obs = info.observations.add(shape=[10], dimension_properties=[1], name="vector")
        obs.float_data.data.extend(vector[i])
        obs = info.observations.add(shape=[2, 3], dimension_properties=[1, 1], observation_type=1)
        obs.float_data.data.extend(goal[i].ravel())
    parsed = UnityRLOutputProto.ListAgentInfoProto.FromString(data)
    assert parsed == expected
    decision, terminal = steps_from_proto(parsed.value, spec)
    assert np.array_equal(decision.obs[1], goal[~done])
    assert np.array_equal(terminal.interrupted, max_step[done])


def test_actions_read_in_bulk_equal_protobuf_fields() -> None:
    n = 64
    message = UnityMessageProto()
    value = message.unity_input.rl_input.agent_actions["Brain"].value
    moves = np.random.default_rng(1).uniform(-1, 1, (n, 2)).astype(np.float32)
    for row in moves:  # the layout UnityEnvironment._generate_step_input writes
        action = value.add()
        action.vector_actions_deprecated.extend(row)
        action.continuous_actions.extend(row)
    parsed = UnityMessageProto.FromString(message.SerializeToString())
    listed = parsed.unity_input.rl_input.agent_actions["Brain"]
    assert np.array_equal(protocol.continuous_actions(listed.SerializeToString(), n, 2), moves)
    assert np.array_equal(protocol.actions(listed, n, SPEC.action_spec).continuous, moves)
    only_new = UnityMessageProto()
    for row in moves[:3]:
        only_new.unity_input.rl_input.agent_actions["Brain"].value.add().continuous_actions.extend(
            row
        )
    other = only_new.unity_input.rl_input.agent_actions["Brain"]
    assert protocol.continuous_actions(other.SerializeToString(), 3, 2) is None  # other layout
    assert np.array_equal(protocol.actions(other, 3, SPEC.action_spec).continuous, moves[:3])
    with pytest.raises(ValueError, match="3 actions for 4 agents"):
        protocol.actions(other, 4, SPEC.action_spec)


def test_side_channel_messages_as_mlagents_writes_and_reads_them() -> None:
    params, engine = EnvironmentParametersChannel(), EngineConfigurationChannel()
    params.set_float_parameter("agent_speed", 0.25)
    params.set_uniform_sampler_parameters("goal_x", -0.5, 0.5, seed=3)
    params.set_gaussian_sampler_parameters("goal_y", 0.0, 0.1, seed=4)
    params.set_multirangeuniform_sampler_parameters("target_radius", [(1, 2), (5, 6)], seed=5)
    engine.set_configuration_parameters(width=80, height=60, time_scale=20.0)
    data = bytes(SideChannelManager([params, engine]).generate_side_channel_messages())
    messages = protocol.split_side_channel(data)
    assert protocol.join_side_channel(messages) == data
    received = side_channels.Parameters()
    values = [received.receive(m)[1] for c, m in messages if c == side_channels.ENV_PARAMETERS]
    assert values == [{"agent_speed": 0.25}, {}, {}, {}]
    draws = [received.draw() for _ in range(200)]
    assert all(-0.5 <= d["goal_x"] < 0.5 for d in draws)
    assert all(1 <= d["target_radius"] < 2 or 5 <= d["target_radius"] < 6 for d in draws)
    assert abs(np.std([d["goal_y"] for d in draws]) - 0.1) < 0.03
    again = side_channels.Parameters()
    for channel, message in messages:
        if channel == side_channels.ENV_PARAMETERS:
            again.receive(message)
    assert again.draw() == draws[0]  # samplers are seeded by the message
    settings = [side_channels.engine_settings(m) for c, m in messages if c == side_channels.ENGINE]
    assert settings == [{"width": 80, "height": 60}, {"time_scale": 20.0}]


def test_stats_messages_parse_with_the_stats_side_channel() -> None:
    source, sink = StatsSideChannel(), StatsSideChannel()
    source.stats["Environment/Success"] += [(1.0, StatsAggregationMethod.AVERAGE)]
    source.stats["Environment/Episode Length"] += [(7.0, StatsAggregationMethod.AVERAGE)]
    for channel, message in side_channels.stats_messages(source):
        assert channel == sink.channel_id
        sink.on_message_received(IncomingMessage(message))
    average = StatsAggregationMethod.AVERAGE
    assert dict(sink.stats) == {
        "Environment/Success": [(1.0, average)],
        "Environment/Episode Length": [(7.0, average)],
    }
    assert source.get_and_reset_stats() == {}


def test_player_accepts_every_unity_player_argument() -> None:
    args = server.parse_args(
        [
            "FindTarget",
            "-nographics",
            "-batchmode",
            "--mlagents-port",
            "5007",
            "-logFile",
            "/tmp/x.log",
            "-screen-width",
            "84",
            "--mlagents-num-areas",
            "8",
        ]
    )
    assert (args.port, args.log_file, args.num_areas, args.no_graphics) == (
        5007,
        "/tmp/x.log",
        8,
        True,
    )
    assert args.ignored == ["-screen-width", "84"]
    assert server.parse_args(["FindTarget", "-logfile", "-", "-batchmode"]).log_file == "-"
    assert server.parse_args(["FindTarget", "-logFile", "-batchmode"]).log_file == "-"
    assert server.parse_args(["FindTarget"]).port == server.DEFAULT_PORT


def test_request_headers_encode_long_paths() -> None:
    long = "/" + "x" * 300
    block = http2.request_headers("localhost:5005", long)
    assert block[:3] == b"\x83\x86\x04" and block[3] == 0x7F  # 7-bit prefix continues
    assert long.encode() in block


class ListLog(list):
    """A player log kept in memory."""

    path = None

    def __call__(self, message: str) -> None:
        self.append(message)


def session(transport: str, channels: list) -> tuple[UnityEnvironment, threading.Thread, ListLog]:
    """A player over ToyEnv (4 areas, seed 5) in a thread, and the UnityEnvironment on it."""
    port, log = free_port(), ListLog()
    args = server.parse_args(
        ["Toy", "--mlagents-port", str(port), "--mlagents-transport", transport]
    )
    player = threading.Thread(target=server.serve, args=(args, toy_factory, log), daemon=True)
    player.start()
    env = UnityEnvironment(
        file_name=None, base_port=port, num_areas=4, seed=5, side_channels=channels, timeout_wait=20
    )
    return env, player, log


@pytest.mark.parametrize("transport", server.TRANSPORTS)
def test_a_session_matches_the_task_it_serves(transport: str) -> None:
    params, stats = EnvironmentParametersChannel(), StatsSideChannel()
    params.set_float_parameter("gain", 2.0)
    env, player, lines = session(transport, channels=[params, stats])
    native = ToyEnv(num_areas=4, seed=5, gain=2.0)
    try:
        env.reset()
        assert env.behavior_specs["Brain"] == SPEC
        rng = np.random.default_rng(2)
        for step in range(12):
            if step == 6:
                params.set_float_parameter("gain", 3.0)
                params.set_float_parameter("unknown", 1.0)  # ignored, the others still apply
                native.set_parameters(gain=3.0)
            got, want = env.get_steps("Brain"), native.get_steps("Brain")
            for a, b in zip(got, want, strict=True):
                assert np.array_equal(a.obs[0], b.obs[0]) and np.array_equal(a.reward, b.reward)
                assert np.array_equal(a.agent_id, b.agent_id)
            assert np.array_equal(got[1].interrupted, want[1].interrupted)
            move = ActionTuple(continuous=rng.uniform(-1, 1, (4, 2)).astype(np.float32))
            env.set_actions("Brain", move)
            native.set_actions("Brain", move)
            env.step()
            native.step()
        lengths = stats.get_and_reset_stats()["Environment/Episode Length"]
        assert sorted(v for v, _ in lengths) == sorted(
            v for v, _ in native.stats_channel.stats["Environment/Episode Length"]
        )
    finally:
        env.close()
        player.join(10)
    assert not player.is_alive()
    assert any("ignored environment parameter {'unknown': 1.0}" in line for line in lines)
    assert "trainer closed (status 400)" in lines[-2] or "connection lost" in lines[-2]


def test_player_without_a_trainer_exits_with_an_error() -> None:
    log = ListLog()
    args = server.parse_args(
        ["Toy", "--mlagents-port", str(free_port()), "--mlagents-connect-timeout", "0.3"]
    )
    assert server.serve(args, toy_factory, log) == 1  # type: ignore[arg-type]
    assert "no gRPC server" in log[-1]


def test_multiple_behaviors_and_empty_terminals_keep_their_order() -> None:
    decision = DecisionSteps(
        [np.ones((2, 10), np.float32)],
        np.zeros(2, np.float32),
        np.array([4, 9], np.int32),
        None,
        np.zeros(2, np.int32),
        np.zeros(2, np.float32),
    )
    encoder = protocol.AgentInfoEncoder(SPEC)
    data = protocol.output_message(
        {"Brain": encoder.encode_steps(decision, TerminalSteps.empty(SPEC))},
        b"",
        [protocol.brain_parameters("Brain", SPEC)],
    )
    message = UnityMessageProto.FromString(data)
    infos = message.unity_output.rl_output.agentInfos["Brain"].value
    assert [i.id for i in infos] == [4, 9] and message.header.status == 200
    brain = message.unity_output.rl_initialization_output.brain_parameters[0]
    assert brain.brain_name == "Brain" and brain.action_spec.num_continuous_actions == 2
