"""Process-wide compute settings: torch's intra-op threads and float32 matmul precision, and
glibc's heap thresholds (`keep_freed_memory`).

Freed tensors stay in the process's heap, so a training step does not fault its memory in anew.

glibc serves a block above its mmap threshold (128 KiB at first; one 1024 x 128 float32
activation is 512 KiB) with a fresh mapping and unmaps it on free, and trims the heap's free
top back to the system: every gradient step then faults its activations and gradients in
again, about 400 page faults a step at the default sizes. PyTorch's CPU tuning guide suggests
jemalloc or tcmalloc for the same cost; glibc's own `mallopt` needs no preloaded library.
The numbers computed do not change, only where their memory comes from.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Iterator

import torch

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024
"""Blocks up to this size come from the heap (glibc's largest mmap threshold on 64 bits)."""
TRIM_THRESHOLD = 128 * 1024 * 1024
"""Free memory at the heap's top kept for reuse before any is given back to the system."""


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process; False where there is no glibc."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl's mallopt does nothing)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with `n` torch intra-op threads, then restore the previous number."""
    previous = torch.get_num_threads()
    if n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """Run the block with `torch.set_float32_matmul_precision(precision)`, then restore it."""
    previous = torch.get_float32_matmul_precision()
    if precision == previous:
        yield
        return
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def set_matmul_precision(precision: str) -> None:
    """`torch.set_float32_matmul_precision(precision)` for this process; left alone when it
    already is (a process that never set it runs torch's own default of `highest`)."""
    if precision != torch.get_float32_matmul_precision():
        torch.set_float32_matmul_precision(precision)
