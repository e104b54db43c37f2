"""Serves a task over the ML-Agents gRPC protocol, as a Unity player build does.

``python -m envs.unity.player <Family> [player arguments]`` is what ``envs/builds/<Family>.x86_64``
runs. As in ML-Agents, Python's ``UnityEnvironment`` is the gRPC server and the player is the
client: it calls ``Exchange`` on ``--mlagents-port`` with its academy parameters, receives the
seed and number of areas, then answers every input (reset, step, quit) with its agents'
infos until Python quits or the connection drops. Environment parameters arrive through
``EnvironmentParametersChannel``; the task's stats go back through ``StatsSideChannel``.

The task is created at the first reset, with the parameters received so far, so a session
``UnityEnvironment(...); reset()`` sees exactly what ``envs.make(name, seed=..., **params)``
shows, and later resets and steps match the native task's one for one.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence

import grpc
from mlagents_envs.base_env import BehaviorSpec
from mlagents_envs.communicator_objects.command_pb2 import QUIT, RESET
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_initialization_input_pb2 import (
    UnityRLInitializationInputProto,
)
from mlagents_envs.communicator_objects.unity_rl_input_pb2 import UnityRLInputProto
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto

import envs
from envs.interface import TaskEnvironment
from envs.unity import protocol, side_channels
from envs.unity.launch import PlayerArgs, PlayerLog, exit_with_parent, parse_args
from envs.unity.side_channels import ENGINE, ENV_PARAMETERS, TRAINING_ANALYTICS

EXCHANGE = "/communicator_objects.UnityToExternalProto/Exchange"
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
EnvFactory = Callable[..., TaskEnvironment]
Log = Callable[[str], None]
Exchange = Callable[[bytes], UnityMessageProto]


class ConnectionLost(ConnectionError):
    """The trainer could not be reached, or ended the connection."""


class Trainer:
    """The gRPC channel to the trainer, whose ``UnityEnvironment`` serves ``Exchange``."""

    def __init__(self, port: int, connect_timeout: float) -> None:
        self.channel = grpc.insecure_channel(f"localhost:{port}", options=CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self.channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            self.channel.close()
            raise ConnectionLost(
                f"no gRPC server on localhost:{port} after {connect_timeout:g} s"
            ) from None
        self.call = self.channel.unary_unary(
            EXCHANGE, response_deserializer=UnityMessageProto.FromString
        )

    def exchange(self, message: bytes) -> UnityMessageProto:
        """Send a serialized ``UnityMessageProto``; the trainer's answer."""
        try:
            return self.call(message)
        except grpc.RpcError as error:
            code = error.code().name if isinstance(error, grpc.Call) else "error"
            raise ConnectionLost(f"gRPC {code}") from None

    def close(self) -> None:
        """Hang up."""
        self.channel.close()


class Player:
    """One session of the protocol between a task and a connected trainer."""

    def __init__(self, args: PlayerArgs, make_env: EnvFactory, log: Log) -> None:
        self.args, self.make_env, self.log = args, make_env, log
        self.env: TaskEnvironment | None = None
        self.specs: dict[str, BehaviorSpec] = {}
        self.parameters = side_channels.Parameters()
        self.agents: dict[str, protocol.AgentInfos] = {}
        self.message = protocol.ok()
        """The output, rewritten in place every step (see protocol.AgentInfos)."""
        self.targets: dict[str, UnityRLOutputProto.ListAgentInfoProto] = {}
        self.decisions: dict[str, int] = {}
        self.steps = 0
        self.spent = dict.fromkeys(("read", "task", "encode", "exchange"), 0.0)

    def run(self, exchange: Exchange) -> str:
        """Hold the session; return why it ended."""
        log_file = self.args.log_file
        log_path = os.path.abspath(log_file) if log_file and log_file != "-" else ""
        reply = exchange(protocol.academy_message(self.args.family, log_path).SerializeToString())
        if reply.header.status != 200:
            return f"trainer refused the connection (status {reply.header.status})"
        num_areas, seed = self._accept(reply.unity_input.rl_initialization_input)
        reply, spent = exchange(protocol.ok().SerializeToString()), self.spent
        while reply.header.status == 200:
            start = time.perf_counter()
            rl_input = reply.unity_input.rl_input
            if rl_input.command == QUIT:
                return "quit command"
            read = self._advance(rl_input, num_areas, seed)
            task = time.perf_counter()
            output = self._output().SerializeToString()
            encoded = time.perf_counter()
            reply = exchange(output)
            spent["read"] += read - start
            spent["task"] += task - read
            spent["encode"] += encoded - task
            spent["exchange"] += time.perf_counter() - encoded
        return f"trainer closed (status {reply.header.status})"

    def timing(self) -> str:
        """Mean time per step in each phase (exchange: the call, trainer's turn included)."""
        steps = max(self.steps, 1)
        return ", ".join(f"{k} {v / steps * 1e6:.0f} us" for k, v in self.spent.items())

    def close(self) -> None:
        """Close the task."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def _accept(self, init: UnityRLInitializationInputProto) -> tuple[int, int]:
        """The number of areas and the seed the trainer asks for."""
        if init.communication_version.split(".")[0] != protocol.API_VERSION.split(".")[0]:
            self.log(
                f"trainer speaks protocol {init.communication_version}, "
                f"this player {protocol.API_VERSION}"
            )
        num_areas, seed = self.args.num_areas or init.num_areas or 1, init.seed
        self.log(f"connected: trainer {init.package_version}, seed {seed}, {num_areas} areas")
        return num_areas, seed

    def _advance(self, rl_input: UnityRLInputProto, num_areas: int, seed: int) -> float:
        """Apply the input and move the task on; when reading the input ended."""
        values = self._read_side_channel(rl_input.side_channel)
        values.update(self.parameters.draw())
        if self.env is None:
            self._create(num_areas, seed, values)
            return time.perf_counter()
        if rl_input.command == RESET:
            self._apply(self.env, values)
            read = time.perf_counter()
            self.env.reset()
            return read
        self._act(self.env, rl_input)
        self._apply(self.env, values)
        read = time.perf_counter()
        self.env.step()
        self.steps += 1
        return read

    def _create(self, num_areas: int, seed: int, values: dict[str, float]) -> None:
        """Make the task with the parameters received so far (the defaults if it refuses)."""
        try:
            env = self.make_env(self.args.family, num_areas=num_areas, seed=seed, **values)
        except (TypeError, ValueError) as error:
            self.log(f"parameters {values} rejected ({error}): starting from the defaults")
            env = self.make_env(self.args.family, num_areas=num_areas, seed=seed)
            self._apply(env, values)
            env.reset()
        self.env, self.specs = env, dict(env.behavior_specs)
        self.log(f"task created: behaviors {', '.join(self.specs)}")

    def _read_side_channel(self, data: bytes) -> dict[str, float]:
        """Log every side-channel message; the parameter values received."""
        values: dict[str, float] = {}
        for channel, payload in side_channels.unpack(data):
            if channel == ENV_PARAMETERS:
                description, received = self.parameters.receive(payload)
                self.log(f"environment parameter {description}")
                values.update(received)
            elif channel == ENGINE:
                settings = side_channels.engine_settings(payload)
                self.log(f"engine configuration (no effect here): {settings}")
            elif channel != TRAINING_ANALYTICS:
                self.log(f"ignored message on unknown side channel {channel}")
        return values

    def _apply(self, env: TaskEnvironment, values: dict[str, float]) -> None:
        """Set parameters together (they are checked together), else one by one."""
        if not values:
            return
        try:
            env.set_parameters(**values)
            return
        except (TypeError, ValueError, KeyError) as error:
            if len(values) == 1:
                self.log(f"ignored environment parameter {values}: {error}")
                return
        for key, value in values.items():
            self._apply(env, {key: value})

    def _act(self, env: TaskEnvironment, rl_input: UnityRLInputProto) -> None:
        """Give every behavior's deciding agents their actions (none sent: empty ones)."""
        for name, spec in self.specs.items():
            n = self.decisions.get(name, 0)
            if n == 0:
                continue
            if name in rl_input.agent_actions:
                acts = protocol.actions(rl_input.agent_actions[name], n, spec.action_spec)
            else:
                acts = spec.action_spec.empty_action(n)
            env.set_actions(name, acts)

    def _output(self) -> UnityMessageProto:
        """The agents of every behavior, new behaviors' parameters, and the stats."""
        assert self.env is not None
        message = self.message
        output = message.unity_output
        output.ClearField("rl_initialization_output")
        for name, spec in self.specs.items():
            if name not in self.agents:
                self.agents[name] = protocol.AgentInfos(spec)
                self.targets[name] = output.rl_output.agentInfos[name]
                brain = protocol.brain_parameters(name, spec)
                output.rl_initialization_output.brain_parameters.append(brain)
            decision, terminal = self.env.get_steps(name)
            self.decisions[name] = len(decision)
            self.agents[name].write(self.targets[name], decision, terminal)
        stats = side_channels.stats_messages(self.env.stats_channel)
        output.rl_output.side_channel = side_channels.pack(stats)
        return message


def serve(args: PlayerArgs, make_env: EnvFactory, log: Log) -> int:
    """Connect to the trainer and hold one session; the exit code."""
    ignored = f", ignored arguments {args.ignored}" if args.ignored else ""
    log(f"{args.family} player: port {args.port}, no_graphics {args.no_graphics}{ignored}")
    try:
        trainer = Trainer(args.port, args.connect_timeout)
    except ConnectionLost as error:
        log(f"quitting: {error}")
        return 1
    player, code = Player(args, make_env, log), 0
    try:
        reason = player.run(trainer.exchange)
    except ConnectionLost as error:
        reason = f"connection lost: {error}"
    except Exception:
        reason, code = f"error:\n{traceback.format_exc()}", 1
    finally:
        player.close()
        trainer.close()
    log(f"quitting after {player.steps} steps: {reason}")
    log(f"time per step: {player.timing()}")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the build launchers."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log = PlayerLog(args.log_file)
    exit_with_parent(log)
    try:
        return serve(args, envs.make, log)
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
