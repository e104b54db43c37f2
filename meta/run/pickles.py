"""What a checkpoint's pickle would call: the globals it names that `weights_only` refuses.

A pickle builds objects by calling the globals it names (`os.system`, a class): loading one
that names anything outside torch's weights-only allow-list runs code. `torch.load` refuses
such a file with wording that changes between releases; reading the pickle's opcodes
(`pickletools`, nothing is called) says which globals it names, whatever torch says.
"""

from __future__ import annotations

import pickletools
import zipfile
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import serialization

STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING"}
MEMO_PUT = {"BINPUT", "LONG_BINPUT", "PUT"}
MEMO_GET = {"BINGET", "LONG_BINGET", "GET"}


def refused_globals(path: Path) -> list[str]:
    """The globals named by `path`'s pickles that a weights-only load refuses, in order."""
    allowed = set(_allowed())
    found: list[str] = []
    for data in _pickles(path):
        for name in _globals(data):
            if name not in allowed and name not in found:
                found.append(name)
    return found


def _allowed() -> Iterator[str]:
    """torch's allow-list and the globals a user registered with `add_safe_globals`."""
    try:
        from torch import _weights_only_unpickler

        yield from _weights_only_unpickler._get_allowed_globals()
    except (ImportError, AttributeError):  # a torch without it: name every global
        pass
    for item in serialization.get_safe_globals():
        obj = item[0] if isinstance(item, tuple) else item
        yield f"{obj.__module__}.{obj.__qualname__}"
    yield from (f"torch.{name}" for name in dir(torch) if name.endswith("Storage"))


def _pickles(path: Path) -> Iterator[bytes]:
    """The pickles of a torch checkpoint: each `.pkl` of its zip, or the file itself."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith(".pkl"):
                    yield archive.read(name)
    else:
        yield path.read_bytes()


def _globals(data: bytes) -> Iterator[str]:
    """`module.name` of each GLOBAL and STACK_GLOBAL (the two strings pushed before it)."""
    strings: list[str | None] = []
    memo: dict[object, str | None] = {}
    top: str | None = None  # what the last opcode pushed, if it was a string
    try:
        for opcode, arg, _ in pickletools.genops(data):
            kind = opcode.name
            if kind in STRINGS or kind in MEMO_GET:
                top = str(arg) if kind in STRINGS else memo.get(arg)
                strings.append(top)
                continue
            if kind in MEMO_PUT or kind == "MEMOIZE":
                memo[len(memo) if kind == "MEMOIZE" else arg] = top
                continue
            if kind == "GLOBAL":
                module, _, name = str(arg).partition(" ")
                yield f"{module}.{name}"
            elif kind == "STACK_GLOBAL" and len(strings) >= 2:
                yield f"{strings[-2]}.{strings[-1]}"
            if kind != "FRAME":
                top = None
    except (ValueError, EOFError):  # damaged: what was read so far is what it names
        return
