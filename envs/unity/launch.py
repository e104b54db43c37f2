"""How a build is launched: a Unity player's command line, its log, its tie to the launcher."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

DEFAULT_PORT = 5004  # a player without --mlagents-port uses the editor's port, as Unity does
OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "--mlagents-port": ("port", int),
    "--mlagents-num-areas": ("num_areas", int),  # ours: overrides the trainer's num_areas
    "--mlagents-connect-timeout": ("connect_timeout", float),  # ours
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
