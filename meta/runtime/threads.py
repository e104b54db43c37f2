"""torch's process-wide settings (intra-op threads, float32 matmul precision) for a block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


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
