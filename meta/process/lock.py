"""The run's lock: one live process per run directory, its holder named, a dead one replaced.

An advisory `fcntl.flock` on `<results_dir>/.<run_id>.lock`, a file beside the run directory
(inside it, `force=true` would delete the lock together with the directory it guards), removed
again when the run ends. The kernel releases the lock when its holder dies however it dies; the
file keeps the holder's pid, host and start time, so a second process can name the holder, and
a process that finds the file of a dead holder says that it takes the run over.

Not `filelock`, though torch already installs it: its 3.x `UnixFileLock` opens the file with
`O_TRUNC` on every attempt, so a refused process would erase the holder's record and the next
refusal could not name the holder; 4.x keeps the contents but also keeps the file on release
(the next holder would read the old record and warn of a takeover that is none) and, on a
filesystem without `flock`, falls back to its SoftFileLock (a marker file, no kernel lock).
The record, the stale check and the refusal, all of this module but one `flock` call, would
stay here either way.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

logger = logging.getLogger(__name__)
HOLDER_WAITS, HOLDER_WAIT_S = 20, 0.025
"""How long a refused process waits for the holder's record (0.5 s in all)."""


class RunLocked(RuntimeError):
    """Another live process holds the run (one-line message naming it)."""


def lock_path(results_dir: str | os.PathLike[str], run_id: str) -> Path:
    """Where the lock of `run_id` lives."""
    return Path(results_dir) / f".{run_id}.lock"


def _holder_record(fd: int) -> dict[str, object]:
    """The holder's record; it writes it just after taking the lock, so wait a moment for it."""
    for _ in range(HOLDER_WAITS):
        record = _read(fd)
        if record and _may_hold(record):
            return record
        time.sleep(HOLDER_WAIT_S)
    return _read(fd)


def _may_hold(record: dict[str, object]) -> bool:
    """False for the record of a process of this host that is gone (a previous holder's)."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """Holds `<results_dir>/.<run_id>.lock` from `acquire()` until `release()`."""

    def __init__(self, results_dir: str | os.PathLike[str], run_id: str) -> None:
        self.path = lock_path(results_dir, run_id)
        self.run_id = run_id
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise RunLocked naming the live holder; warn on a stale record."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(_holder_record(fd))
                os.close(fd)
                raise RunLocked(
                    f"run {self.run_id!r} is in use by {holder}; wait for it to finish or stop it"
                ) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # its holder removed the file as we opened it: lock the new one
        previous = _read(fd)
        if previous:
            logger.warning(
                "Run %r was held by %s, which is no longer running; taking it over",
                self.run_id,
                _describe(previous),
            )
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file, then unlock (a process waiting on it retries on a new one)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _read(fd: int) -> dict[str, object]:
    """The holder record in the lock file; empty when none (or unreadable)."""
    data = os.pread(fd, 4096, 0)
    try:
        record = json.loads(data) if data.strip() else {}
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _describe(record: dict[str, object]) -> str:
    """`pid 123 on host h (since 2026-12-01 10:00:00)`, or a plain phrase when unknown."""
    if not record:
        return "another process"
    since = record.get("since")
    when = (
        f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
        if isinstance(since, int | float)
        else ""
    )
    return f"pid {record.get('pid')} on host {record.get('host')}{when}"


def live_holder(results_dir: str | os.PathLike[str], run_id: str) -> dict[str, object] | None:
    """The record of the process holding `run_id` now, read without locking; None when free.

    A record of a process of this host that is gone (a killed run's) counts as free; one of
    another host is taken as live, since its pid cannot be checked from here.
    """
    try:
        text = lock_path(results_dir, run_id).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError, UnicodeDecodeError):
        return None
    try:
        record = json.loads(text) if text.strip() else {}
    except ValueError:
        record = {}
    if not isinstance(record, dict) or not record:
        return {}  # the holder is between taking the lock and writing its record
    return record if _may_hold(record) else None
