"""The player side of the ML-Agents protocol: messages, side channels, a whole session.

Sessions here run the player in a thread against a real ``UnityEnvironment`` (editor mode:
no executable), over a tiny task of the test's own, so the protocol is checked apart from
the built-in tasks (``tests/envs/test_unity_backend.py`` runs the real builds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

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
from mlagents_envs.communicator_objects.command_pb2 import QUIT, RESET, STEP
from mlagents_envs.communicator_objects.observation_pb2 import ObservationProto
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_input_pb2 import UnityRLInputProto
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

from envs.backend.unity_env import resolve_build
from envs.unity import launch, protocol, side_channels
from envs.unity import player as server

FreePorts = Callable[..., int]
# mlagents_envs 0.28 compares versions with distutils' StrictVersion.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:mlagents_envs.*")
VECTOR = ObservationSpec((10,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "vector")
GOAL = ObservationSpec((2, 3), (DimensionProperty.NONE,) * 2, ObservationType.GOAL_SIGNAL, "")
SPEC = BehaviorSpec([VECTOR], ActionSpec.create_continuous(2))


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


def random_steps(
    rng: np.random.Generator, spec: BehaviorSpec, ids: np.ndarray, ended: np.ndarray
) -> tuple[DecisionSteps, TerminalSteps]:
    """Steps of agents ``ids`` with random observations and rewards; ``ended`` also end."""
    n, k = len(ids), len(ended)

    def obs(count: int) -> list[np.ndarray]:
        return [rng.random((count, *o.shape), dtype=np.float32) for o in spec.observation_specs]

    decision = DecisionSteps(
        obs(n),
        rng.standard_normal(n).astype(np.float32),
        ids.astype(np.int32),
        None,
        np.zeros(n, np.int32),
        np.zeros(n, np.float32),
    )
    terminal = TerminalSteps(
        obs(k),
        rng.standard_normal(k).astype(np.float32),
        rng.random(k) < 0.5,
        ended.astype(np.int32),
        np.zeros(k, np.int32),
        np.zeros(k, np.float32),
    )
    return decision, terminal


@pytest.mark.parametrize("kept", [False, True], ids=["new message", "kept message"])
def test_agent_infos_read_back_as_the_steps_they_were_built_from(kept: bool) -> None:
    # kept: one message rewritten step after step, as the player keeps its output
    rng = np.random.default_rng(0)
    spec = BehaviorSpec([VECTOR, GOAL], ActionSpec.create_continuous(2))
    infos = protocol.AgentInfos(spec)
    schedule = [  # (deciding agents, ending agents): same agents, new ones, none deciding
        (np.arange(64), np.array([], int)),
        (np.arange(64), np.array([3, 17, 60])),
        (np.arange(64), np.array([5])),
        (np.arange(5) + 100, np.array([0, 2**31 - 1])),
        (np.arange(5) + 100, np.array([], int)),
        (np.array([], int), np.array([101])),
        (np.array([127, 128, 3]), np.array([], int)),
    ]
    message = UnityRLOutputProto.ListAgentInfoProto()
    for ids, ended in schedule:
        decision, terminal = random_steps(rng, spec, ids, ended)
        if not kept:
            message = UnityRLOutputProto.ListAgentInfoProto()
        infos.write(message, decision, terminal)
        assert len(message.value) == len(ids) + len(ended)
        parsed = UnityRLOutputProto.ListAgentInfoProto.FromString(message.SerializeToString())
        got_decision, got_terminal = steps_from_proto(parsed.value, spec)
        for got, want in ((got_decision, decision), (got_terminal, terminal)):
            assert np.array_equal(got.agent_id, want.agent_id)
            assert np.array_equal(got.reward, want.reward)
            for a, b in zip(got.obs, want.obs, strict=True):
                assert np.array_equal(a, b)
        assert np.array_equal(got_terminal.interrupted, terminal.interrupted)
    first = parsed.value[0]
    assert first.observations[1] == ObservationProto(
        shape=[2, 3],
        dimension_properties=[1, 1],
        observation_type=1,
        float_data=ObservationProto.FloatData(data=decision.obs[1][0].ravel().tolist()),
    )
    assert first.observations[0].name == "vector"


def test_actions_as_unity_environment_writes_them() -> None:
    n = 64
    message = UnityMessageProto()
    listed = message.unity_input.rl_input.agent_actions["Brain"]
    moves = np.random.default_rng(1).uniform(-1, 1, (n, 2)).astype(np.float32)
    for row in moves:  # the layout UnityEnvironment._generate_step_input writes
        action = listed.value.add()
        action.vector_actions_deprecated.extend(row)
        action.continuous_actions.extend(row)
    parsed = UnityMessageProto.FromString(message.SerializeToString())
    got = protocol.actions(parsed.unity_input.rl_input.agent_actions["Brain"], n, SPEC.action_spec)
    assert np.array_equal(got.continuous, moves) and got.continuous.dtype == np.float32
    with pytest.raises(ValueError, match="64 actions for 65 agents"):
        protocol.actions(listed, n + 1, SPEC.action_spec)
    hybrid = ActionSpec(1, (3, 2))
    mixed = UnityMessageProto().unity_input.rl_input.agent_actions["Brain"]
    for i in range(3):
        mixed.value.add(continuous_actions=[i / 2], discrete_actions=[i, 1])
    got = protocol.actions(mixed, 3, hybrid)
    assert np.array_equal(got.continuous, [[0.0], [0.5], [1.0]])
    assert np.array_equal(got.discrete, [[0, 1], [1, 1], [2, 1]])
    none = protocol.actions(UnityRLInputProto.ListAgentActionProto(), 0, hybrid)
    assert none.continuous.shape == (0, 1) and none.discrete.shape == (0, 2)


def test_side_channel_messages_as_mlagents_writes_and_reads_them() -> None:
    params, engine = EnvironmentParametersChannel(), EngineConfigurationChannel()
    params.set_float_parameter("agent_speed", 0.25)
    params.set_uniform_sampler_parameters("goal_x", -0.5, 0.5, seed=3)
    params.set_gaussian_sampler_parameters("goal_y", 0.0, 0.1, seed=4)
    params.set_multirangeuniform_sampler_parameters("target_radius", [(1, 2), (5, 6)], seed=5)
    engine.set_configuration_parameters(width=80, height=60, time_scale=20.0)
    data = bytes(SideChannelManager([params, engine]).generate_side_channel_messages())
    messages = side_channels.unpack(data)
    assert side_channels.pack(messages) == data
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
    with pytest.raises(ValueError, match="truncated"):
        side_channels.unpack(data[:-1])


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
    args = launch.parse_args(
        [
            "FindTarget",
            "-nographics",
            "-batchmode",
            "--mlagents-port",
            "5007",
            "-logFile",
            "logs/player.log",
            "-screen-width",
            "84",
            "--mlagents-num-areas",
            "8",
            "--mlagents-transport",  # an option of older players: kept and ignored
            "http2",
        ]
    )
    assert (args.port, args.log_file, args.num_areas, args.no_graphics) == (
        5007,
        "logs/player.log",
        8,
        True,
    )
    assert args.ignored == ["-screen-width", "84", "--mlagents-transport", "http2"]
    assert launch.parse_args(["FindTarget", "-logfile", "-", "-batchmode"]).log_file == "-"
    assert launch.parse_args(["FindTarget", "-logFile", "-batchmode"]).log_file == "-"
    assert launch.parse_args(["FindTarget"]).port == launch.DEFAULT_PORT
    with pytest.raises(SystemExit, match="needs a value"):
        launch.parse_args(["FindTarget", "--mlagents-port"])


class ListLog(list):
    """A player log kept in memory."""

    def __call__(self, message: str) -> None:
        self.append(message)


class ScriptedTrainer:
    """A trainer answering the player's messages (kept in ``sent``) with ``inputs`` in turn."""

    def __init__(self, *inputs: UnityMessageProto) -> None:
        self.inputs, self.sent = iter(inputs), list[UnityMessageProto]()

    def __call__(self, message: bytes) -> UnityMessageProto:
        self.sent.append(UnityMessageProto.FromString(message))
        return next(self.inputs)


def command(kind: int) -> UnityMessageProto:
    """A trainer's input carrying ``kind`` (RESET, STEP, QUIT)."""
    message = UnityMessageProto()
    message.header.status = 200
    message.unity_input.rl_input.command = kind
    return message


def test_the_first_output_announces_the_behavior_and_later_ones_do_not() -> None:
    init = UnityMessageProto()
    init.header.status = 200
    init.unity_input.rl_initialization_input.num_areas = 3
    init.unity_input.rl_initialization_input.communication_version = "1.5.0"
    step = command(STEP)
    listed = step.unity_input.rl_input.agent_actions["Brain"]
    for _ in range(3):
        listed.value.add(continuous_actions=[0.5, -0.5])
    trainer = ScriptedTrainer(init, command(RESET), step, step, command(QUIT))
    args = launch.parse_args(["Toy", "-logFile", "-"])
    player = server.Player(args, toy_factory, ListLog())
    assert player.run(trainer) == "quit command" and player.steps == 2
    academy, ready, *outputs = trainer.sent
    assert academy.unity_output.rl_initialization_output.communication_version == "1.5.0"
    assert not ready.HasField("unity_output")
    brains = [o.unity_output.rl_initialization_output.brain_parameters for o in outputs]
    assert [len(b) for b in brains] == [1, 0, 0]
    assert brains[0][0].brain_name == "Brain"
    assert brains[0][0].action_spec.num_continuous_actions == 2
    for output in outputs:
        infos = output.unity_output.rl_output.agentInfos["Brain"].value
        assert [i.id for i in infos if not i.done] == [0, 1, 2]
    native = ToyEnv(num_areas=3)
    native.set_actions("Brain", ActionTuple(continuous=np.tile(np.float32([0.5, -0.5]), (3, 1))))
    native.step()
    decision, _ = steps_from_proto(
        outputs[1].unity_output.rl_output.agentInfos["Brain"].value, SPEC
    )
    assert np.array_equal(decision.obs[0], native.get_steps("Brain")[0].obs[0])


def session(port: int, channels: list) -> tuple[UnityEnvironment, threading.Thread, ListLog]:
    """A player over ToyEnv (4 areas, seed 5) in a thread, and the UnityEnvironment on it."""
    log = ListLog()
    args = launch.parse_args(["Toy", "--mlagents-port", str(port)])
    player = threading.Thread(target=server.serve, args=(args, toy_factory, log), daemon=True)
    player.start()
    env = UnityEnvironment(
        file_name=None, base_port=port, num_areas=4, seed=5, side_channels=channels, timeout_wait=20
    )
    return env, player, log


def test_a_session_matches_the_task_it_serves(free_ports: FreePorts) -> None:
    params, stats = EnvironmentParametersChannel(), StatsSideChannel()
    params.set_float_parameter("gain", 2.0)
    env, player, lines = session(free_ports(), channels=[params, stats])
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


def test_the_player_quits_when_the_trainer_vanishes(free_ports: FreePorts) -> None:
    env, player, lines = session(free_ports(), channels=[])
    try:
        env.reset()
        env._communicator.server.stop(None)  # no goodbye sent
        player.join(10)
    finally:
        env.close()
    assert not player.is_alive()
    assert "connection lost: gRPC" in lines[-2]


def test_player_without_a_trainer_exits_with_an_error(free_ports: FreePorts) -> None:
    log = ListLog()
    args = launch.parse_args(
        ["Toy", "--mlagents-port", str(free_ports()), "--mlagents-connect-timeout", "0.3"]
    )
    assert server.serve(args, toy_factory, log) == 1
    assert "no gRPC server" in log[-1]


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_build_launched_with_an_older_command_line_still_serves(
    tmp_path: Path, free_ports: FreePorts
) -> None:
    env = UnityEnvironment(
        file_name=resolve_build("FindTarget"),
        base_port=free_ports(),
        no_graphics=True,
        num_areas=2,
        log_folder=str(tmp_path),
        additional_args=["--mlagents-transport", "http2"],
        timeout_wait=30,
    )
    try:
        env.reset()
        assert len(env.get_steps("Brain")[0]) == 2
        env.step()
    finally:
        env.close()
    log = (tmp_path / "Player-0.log").read_text()
    assert "ignored arguments ['--mlagents-transport', 'http2']" in log
    assert "quitting after 1 steps: " in log  # trainer closed, or its server stopped first
