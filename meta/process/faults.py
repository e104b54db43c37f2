"""Named points where a test can make the process die or its disk fill up, for real.

`META_HARNESS_FAULT=<point>@<meta_step>` kills the process with SIGKILL when the run reaches
that point of that meta-step, and `<point>@<meta_step>:SIGINT` (or `:SIGTERM`) sends it that
signal there instead, for real; `META_HARNESS_FAULT=disk_full@<meta_step>` makes every state
write of that meta-step and after fail with ENOSPC. Unset (always, outside the fault-injection
tests), a point costs one dictionary look-up.
"""

from __future__ import annotations

import errno
import os
import signal

FAULT_ENV = "META_HARNESS_FAULT"
POINTS = (
    "inner_training",
    "before_kept",
    "before_commit",
    "after_commit",
    "after_status",
    "after_rows",
    "after_writers",
)
"""In the order a meta-step passes them; the commit is the replace of Brain/checkpoint.pt."""
END_POINTS = ("after_final", "after_release")
"""After the last meta-step (`@meta.steps`): final weights and status written; run released."""

_meta_step = -1


def at(point: str, meta_step: int) -> None:
    """Die here if the fault names this point and meta-step."""
    global _meta_step
    _meta_step = meta_step
    spec, _, sig = os.environ.get(FAULT_ENV, "").partition(":")
    if spec == f"{point}@{meta_step}":
        os.kill(os.getpid(), getattr(signal, sig) if sig else signal.SIGKILL)


def check_disk(path: str) -> None:
    """Raise ENOSPC for `path` if the fault fills the disk from the current meta-step on."""
    spec = os.environ.get(FAULT_ENV, "")
    if spec.startswith("disk_full@") and _meta_step >= int(spec.split("@")[1]):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
