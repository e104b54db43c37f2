"""Which machine a figure or a result came from: the CPU as the kernel describes it."""

from __future__ import annotations

from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")
_KIND = (("cpu family", "family"), ("model", "model"), ("stepping", "stepping"))
"""The /proc/cpuinfo fields that name a CPU's generation, and their names in cpu_kind."""


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


def cpu_kind(blocks: list[dict[str, str]] | None = None) -> str:
    """What tells two CPUs of one model name apart, e.g. 'family 25 model 1 stepping 1, torch
    AVX2': a hypervisor may name two generations alike, and their kernels round differently."""
    blocks = cpu_blocks() if blocks is None else blocks
    first = blocks[0] if blocks else {}
    kind = " ".join(f"{name} {first[key]}" for key, name in _KIND if key in first)
    kernels = f"torch {torch.backends.cpu.get_cpu_capability()}"
    return f"{kind}, {kernels}" if kind else kernels


def _field(line: str) -> tuple[str, str]:
    key, value = line.split(":", 1)
    return key.strip(), value.strip()
