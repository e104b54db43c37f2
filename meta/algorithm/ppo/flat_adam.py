"""Adam over parameters packed into one flat buffer: one gradient norm, one update of a vector."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


class FlatAdam:
    """Adam (torch.optim.Adam's arithmetic) on parameters that are views of one flat tensor.

    Their gradients are views of one flat tensor too, and backward accumulates into them in
    place: clipping the global gradient norm is one norm and one multiply, and the Adam update
    is a handful of vector operations instead of a dozen per tensor plus torch.optim's
    bookkeeping (whose first construction in a process also imports torch._dynamo: ~1 s).
    The parameters stay views of the flat buffer, with unchanged values, names and state_dict;
    `release()` detaches the gradient views.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        lr: float,
        eps: float,
        betas: tuple[float, float] = (0.9, 0.999),
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        for p in self.params:
            size = p.numel()
            p.data = self.flat[offset : offset + size].view_as(p)
            p.grad = self.grad[offset : offset + size].view_as(p)
            offset += size
        self.param_groups: list[dict[str, Any]] = [{"lr": lr}]
        self.eps, self.betas, self.steps = eps, betas, 0
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)

    def zero_grad(self) -> None:
        """Zero the flat gradient (its views stay attached to the parameters)."""
        self.grad.zero_()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Scale gradients to a global 2-norm of at most max_norm, as clip_grad_norm_ does."""
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step on the flat parameters."""
        beta1, beta2 = self.betas
        self.steps += 1
        self.exp_avg.lerp_(self.grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(self.grad, self.grad, value=1 - beta2)
        step_size = self.param_groups[0]["lr"] / (1 - beta1**self.steps)
        denom = self.exp_avg_sq.sqrt().div_((1 - beta2**self.steps) ** 0.5).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-step_size)

    def release(self) -> None:
        """Detach the gradient views from the parameters."""
        for p in self.params:
            p.grad = None
