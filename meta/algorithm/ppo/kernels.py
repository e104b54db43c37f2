"""The kernels that differ between a stack of one training (a single network's) and a stack
of several (batched ones): the one place that chooses by k (docs/performance.md says why)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
from torch.nn import functional as F


def update_threads_for(k: int, device: torch.device) -> tuple[ThreadPoolExecutor | None, int]:
    """How an update uses the CPU's threads: a worker thread (or None) and torch's threads.

    A stack of one runs each half of the loss on one thread, side by side when torch may use
    2+ (no per-kernel hand-off, half the working set per core, and graceful when another
    process takes a core); a stack of several runs both halves as one backward over all of
    torch's threads, whose batched products use them better. The bits are the same either way.
    """
    if device.type != "cpu" or k > 1:
        return None, torch.get_num_threads()
    return (ThreadPoolExecutor(1) if torch.get_num_threads() >= 2 else None), 1


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x W^T + b of every member: (k, n, in), (k, out, in), (k, out) -> (k, n, out)."""
    if weight.shape[0] == 1:
        # squeeze, not [0]: a select's backward fills a zero (1, ...) tensor every step
        return F.linear(x.squeeze(0), weight.squeeze(0), bias.squeeze(0)).unsqueeze(0)
    return torch.baddbmm(bias[:, None], x, weight.transpose(1, 2))


def gathered(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Rows of each member's (k, N, ...) in its own order (k, N)."""
    if x.shape[0] == 1:
        return x.squeeze(0).index_select(0, order[0]).unsqueeze(0)
    index = order.view(*order.shape, *([1] * (x.ndim - 2))).expand(*order.shape, *x.shape[2:])
    return torch.gather(x, 1, index)


def clip_grad_norms(params: list[torch.Tensor], max_norm: float) -> None:
    """Scale each member's gradients to a global norm of at most `max_norm`."""
    grads = [p.grad for p in params if p.grad is not None]
    k = grads[0].shape[0]
    if k == 1:
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return
    # summed gradient by gradient, not as one reduction over a (gradients, k) stack: how that
    # reduction groups its additions depends on k, and a member's norm must not
    squares = grads[0].reshape(k, -1).square().sum(1)
    for g in grads[1:]:
        squares = squares + g.reshape(k, -1).square().sum(1)
    coef = torch.clamp(max_norm / (squares.sqrt() + 1e-6), max=1.0)
    torch._foreach_mul_(grads, [coef.view(k, *([1] * (g.ndim - 1))) for g in grads])


def times(factors: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Each member's factor (k,) in float64 times its x (k,).

    A single network's scalar loss times a Python number rounds as torch rounds two numbers
    (0-dimensional tensors), not as it rounds a vector times a scalar.
    """
    if x.shape[0] == 1:
        return (factors[0].item() * x[0]).unsqueeze(0)
    return factors.to(device=x.device, dtype=x.dtype) * x


def per_count(n: int, total: torch.Tensor) -> torch.Tensor:
    """n / total of each member's (k, 1) counts, rounded as a single normaliser's (0-dim)."""
    if total.shape[0] == 1:
        return n / total.reshape(())
    return n / total
