"""Which machine a figure or a result came from: the CPU as the kernel describes it."""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_blocks() -> list[dict[str, str]]:
    """Each logical CPU's fields of /proc/cpuinfo, in order (none off Linux)."""
    text = CPUINFO.read_text() if CPUINFO.exists() else ""
    blocks = [block for block in text.split("\n\n") if block.strip()]
    return [dict(_field(line) for line in b.splitlines() if ":" in line) for b in blocks]


def cpu_model(blocks: list[dict[str, str]] | None = None) -> str:
    """The first CPU's model name ('unknown' where the kernel gives none), from `blocks` if
    already read."""
    blocks = cpu_blocks() if blocks is None else blocks
    return blocks[0].get("model name", "unknown") if blocks else "unknown"


def _field(line: str) -> tuple[str, str]:
    key, value = line.split(":", 1)
    return key.strip(), value.strip()
