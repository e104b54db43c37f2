"""Atomic file writes: readers see the old file or the new one, never a half-written one."""

from __future__ import annotations

import io
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch

from meta.process import faults

StrPath = str | os.PathLike[str]


def _fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (POSIX only; a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: StrPath, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success move it over `path`, else delete it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(target.parent)


def _atomic_write(path: StrPath, write: Callable[[BinaryIO], Any], durable: bool = True) -> None:
    """Write through `write(file)` into a temporary file, then replace `path`.

    Atomic either way (a crash leaves the old file or the new one); `durable` also fsyncs the
    file and its directory, so the new file survives a power loss too (about 8 ms a file here).
    """
    try:
        faults.check_disk(str(path))
        with atomic_path(path, durable) as tmp:
            # O_EXCL: never follow or clobber a stray file; 0o666 lets the umask decide the mode.
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            with os.fdopen(os.open(tmp, flags, 0o666), "wb") as f:
                write(f)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
    except OSError as error:
        if error.errno is None:
            raise
        # A failed write names no file, or the temporary one: name the file being replaced.
        raise OSError(error.errno, error.strerror, str(path)) from error


def atomic_write_bytes(path: StrPath, data: bytes, durable: bool = True) -> None:
    """Atomically replace `path` with `data` (parent directories are created)."""
    _atomic_write(path, lambda f: f.write(data), durable)


def atomic_write_text(
    path: StrPath, text: str, encoding: str = "utf-8", durable: bool = True
) -> None:
    """Atomically replace `path` with `text`."""
    atomic_write_bytes(path, text.encode(encoding), durable)


def torch_bytes(obj: Any) -> bytes:
    """Serialise `obj` with `torch.save` into bytes."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()
