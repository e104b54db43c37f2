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
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import grpc
from mlagents_envs.base_env import BaseEnv, BehaviorSpec
from mlagents_envs.communicator_objects.command_pb2 import QUIT, RESET
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_input_pb2 import UnityRLInputProto

from envs.unity import http2, protocol, side_channels
from envs.unity.side_channels import ENGINE, ENV_PARAMETERS, TRAINING_ANALYTICS

DEFAULT_PORT = 5004  # a player without --mlagents-port uses the editor's port, as Unity does
EXCHANGE = "/communicator_objects.UnityToExternalProto/Exchange"
TRANSPORTS = ("http2", "grpc")
EnvFactory = Callable[..., BaseEnv]
Exchange = Callable[[bytes], UnityMessageProto]
OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "--mlagents-port": ("port", int),
    "--mlagents-num-areas": ("num_areas", int),  # ours: overrides the trainer's num_areas
    "--mlagents-connect-timeout": ("connect_timeout", float),  # ours
    "--mlagents-transport": ("transport", str),  # ours: http2 (default) or grpc (grpcio)
}


@dataclass
class PlayerArgs:
    """The command line a Unity player understands (unknown arguments are kept, unused)."""

    family: str
    port: int = DEFAULT_PORT
    log_file: str | None = None
    num_areas: int | None = None
    no_graphics: bool = False
    connect_timeout: float = 60.0
    transport: str = "http2"
    ignored: list[str] = field(default_factory=list)


def parse_args(argv: Sequence[str]) -> PlayerArgs:
    """Read ``<Family> [-logFile p] [--mlagents-port n] [-nographics] [-batchmode] ...``."""
    if not argv or argv[0].startswith("-"):
        raise SystemExit("usage: python -m envs.unity.player <Family> [Unity player arguments]")
    args, rest, i = PlayerArgs(family=argv[0]), list(argv[1:]), 0
    while i < len(rest):
        key = rest[i].lower()
        value = rest[i + 1] if i + 1 < len(rest) else None
        if key == "-logfile":  # Unity: "-logFile -" or a bare "-logFile" log to stdout
            takes_value = value is not None and (value == "-" or not value.startswith("-"))
            args.log_file = value if takes_value else "-"
            i += 1 + takes_value
        elif key in OPTIONS:
            if value is None:
                raise SystemExit(f"{rest[i]} needs a value")
            name, kind = OPTIONS[key]
            setattr(args, name, kind(value))
            i += 2
        else:
            if key == "-nographics":
                args.no_graphics = True
            elif key != "-batchmode":
                args.ignored.append(rest[i])
            i += 1
    return args


class PlayerLog:
    """The player log (``-logFile``): a file, ``-`` for stdout, stderr when not given."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        if path and path != "-":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._stream: TextIO = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        else:
            self._stream = sys.stdout if path == "-" else sys.stderr

    def __call__(self, message: str) -> None:
        """Write one timestamped line."""
        self._stream.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {message}\n")

    def close(self) -> None:
        """Flush, and close the file if there is one."""
        self._stream.flush()
        if self._stream not in (sys.stdout, sys.stderr):
            self._stream.close()


class Player:
    """One session of the protocol between a task and a connected trainer."""

    def __init__(self, args: PlayerArgs, make_env: EnvFactory, log: PlayerLog) -> None:
        self.args, self.make_env, self.log = args, make_env, log
        self.env: BaseEnv | None = None
        self.specs: dict[str, BehaviorSpec] = {}
        self.parameters = side_channels.Parameters()
        self.encoders: dict[str, protocol.AgentInfoEncoder] = {}
        self.decisions: dict[str, int] = {}
        self.steps = 0
        self.spent = dict.fromkeys(("read", "task", "encode", "exchange"), 0.0)

    def run(self, exchange: Exchange) -> str:
        """Hold the session; return why it ended."""
        log_path = os.path.abspath(self.log.path) if self.log.path not in (None, "-") else ""
        reply = exchange(protocol.academy_message(self.args.family, log_path))
        if reply.header.status != 200:
            return f"trainer refused the connection (status {reply.header.status})"
        init = reply.unity_input.rl_initialization_input
        if init.communication_version.split(".")[0] != protocol.API_VERSION.split(".")[0]:
            self.log(
                f"trainer speaks protocol {init.communication_version}, "
                f"this player {protocol.API_VERSION}"
            )
        num_areas, seed = self.args.num_areas or init.num_areas or 1, init.seed
        self.log(f"connected: trainer {init.package_version}, seed {seed}, {num_areas} areas")
        reply, clock, spent = exchange(protocol.OK), time.perf_counter, self.spent
        while reply.header.status == 200:
            start = clock()
            rl_input = reply.unity_input.rl_input
            values = self._read_side_channel(rl_input.side_channel)
            if rl_input.command == QUIT:
                return "quit command"
            values.update(self.parameters.draw())
            if self.env is None:
                self._create(num_areas, seed, values)
                read = clock()
            elif rl_input.command == RESET:
                self._apply(values)
                read = clock()
                self.env.reset()
            else:
                self._act(rl_input)
                self._apply(values)
                read = clock()
                self.env.step()
                self.steps += 1
            task = clock()
            output = self._output()
            encoded = clock()
            reply = exchange(output)
            spent["read"] += read - start
            spent["task"] += task - read
            spent["encode"] += encoded - task
            spent["exchange"] += clock() - encoded
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

    def _create(self, num_areas: int, seed: int, values: dict[str, float]) -> None:
        try:
            self.env = self.make_env(self.args.family, num_areas=num_areas, seed=seed, **values)
        except (TypeError, ValueError) as error:
            self.log(f"parameters {values} rejected ({error}): starting from the defaults")
            self.env = self.make_env(self.args.family, num_areas=num_areas, seed=seed)
            self._apply(values)
            self.env.reset()
        self.specs = dict(self.env.behavior_specs)
        self.log(f"task created: behaviors {', '.join(self.specs)}")

    def _read_side_channel(self, data: bytes) -> dict[str, float]:
        values: dict[str, float] = {}
        for channel, payload in protocol.split_side_channel(data):
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

    def _apply(self, values: dict[str, float]) -> None:
        """Set parameters together (they are checked together), else one by one."""
        if not values:
            return
        try:
            self.env.set_parameters(**values)  # type: ignore[union-attr]
            return
        except (TypeError, ValueError, KeyError) as error:
            if len(values) == 1:
                self.log(f"ignored environment parameter {values}: {error}")
                return
        for key, value in values.items():
            self._apply({key: value})

    def _act(self, rl_input: UnityRLInputProto) -> None:
        assert self.env is not None
        for name, spec in self.specs.items():
            n = self.decisions.get(name, 0)
            if n == 0:
                continue
            if name in rl_input.agent_actions:
                acts = protocol.actions(rl_input.agent_actions[name], n, spec.action_spec)
            else:
                acts = spec.action_spec.empty_action(n)
            self.env.set_actions(name, acts)

    def _output(self) -> bytes:
        assert self.env is not None
        infos, brains = {}, []
        for name, spec in self.specs.items():
            if name not in self.encoders:
                self.encoders[name] = protocol.AgentInfoEncoder(spec)
                brains.append(protocol.brain_parameters(name, spec))
            decision, terminal = self.env.get_steps(name)
            self.decisions[name] = len(decision)
            infos[name] = self.encoders[name].encode_steps(decision, terminal)
        stats = getattr(self.env, "stats_channel", None)
        side = (
            b""
            if stats is None
            else protocol.join_side_channel(side_channels.stats_messages(stats))
        )
        return protocol.output_message(infos, side, brains)


def connect(args: PlayerArgs) -> tuple[Exchange, Callable[[], None]]:
    """The Exchange call to the trainer on ``args.port``, and how to hang up."""
    if args.transport == "http2":
        channel = http2.UnaryChannel("localhost", args.port, EXCHANGE, args.connect_timeout)
        return (lambda message: UnityMessageProto.FromString(channel.call(message))), channel.close
    if args.transport != "grpc":
        raise SystemExit(f"unknown transport {args.transport!r} (use one of {TRANSPORTS})")
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    link = grpc.insecure_channel(f"localhost:{args.port}", options=options)
    try:
        grpc.channel_ready_future(link).result(timeout=args.connect_timeout)
    except grpc.FutureTimeoutError:
        link.close()
        raise http2.ConnectionLost(f"no trainer on port {args.port}") from None
    call = link.unary_unary(EXCHANGE, response_deserializer=UnityMessageProto.FromString)

    def exchange(message: bytes) -> UnityMessageProto:
        try:
            return call(message)
        except grpc.RpcError as error:
            raise http2.ConnectionLost(f"gRPC {error.code().name}") from None  # type: ignore[attr-defined]

    return exchange, link.close


def serve(args: PlayerArgs, make_env: EnvFactory, log: PlayerLog) -> int:
    """Connect to the trainer and hold one session; the exit code."""
    log(
        f"{args.family} player: port {args.port}, no_graphics {args.no_graphics}, "
        f"transport {args.transport}"
        + (f", ignored arguments {args.ignored}" if args.ignored else "")
    )
    try:
        exchange, hang_up = connect(args)
    except http2.ConnectionLost as error:
        log(f"quitting: {error}")
        return 1
    player, code = Player(args, make_env, log), 0
    try:
        reason = player.run(exchange)
    except http2.ConnectionLost as error:
        reason = f"connection lost: {error}"
    except Exception:
        reason, code = f"error:\n{traceback.format_exc()}", 1
    finally:
        player.close()
        hang_up()
    log(f"quitting after {player.steps} steps: {reason}")
    log(f"time per step: {player.timing()}")
    return code


def exit_with_parent(log: PlayerLog) -> None:
    """Quit when the process that launched this player dies (no orphaned players)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log("the process that launched this player died: quitting")
        log.close()
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the build launchers."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log = PlayerLog(args.log_file)
    exit_with_parent(log)
    import envs

    try:
        return serve(args, envs.make, log)
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
