"""Adam and SGD over stacked parameters: each member its own learning rate, state and clip.

The formulas are those of torch.optim's fused Adam and of SGD (meta.algorithm.ppo.optim steps
through them), with the learning rate a (k,) tensor; `clip_grad_norms` is
`torch.nn.utils.clip_grad_norm_` taken per member over its slice of every gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from meta.algorithm.ppo.weights import OptimizerState

BETA1, BETA2 = 0.9, 0.999


def clip_grad_norms(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale each member's gradients to a global norm of at most `max_norm`; the norms (k,)."""
    grads = [p.grad for p in params if p.grad is not None]
    k = grads[0].shape[0]
    # summed gradient by gradient, not as one reduction over a (gradients, k) stack: how that
    # reduction groups its additions depends on k, and a member's norm must not
    squares = grads[0].reshape(k, -1).square().sum(1)
    for g in grads[1:]:
        squares = squares + g.reshape(k, -1).square().sum(1)
    norms = squares.sqrt()
    coef = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
    torch._foreach_mul_(grads, [coef.view(k, *([1] * (g.ndim - 1))) for g in grads])
    return norms


class StackedOptimizer:
    """`adam` (fused torch.optim.Adam's arithmetic) or `sgd` over stacked parameters.

    `scaled` parameters step as they would stored times `scale` (ppo.action_scale): Adam at
    lr / scale and eps * scale, SGD at lr / scale^2, as meta.algorithm.ppo.optim does.
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        kind: str,
        eps: float,
        scaled: list[torch.Tensor],
        scale: float,
    ) -> None:
        self.params, self.kind, self.eps = params, kind, eps
        self.scale_of = {id(p): (scale if any(p is s for s in scaled) else 1.0) for p in params}
        self.moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
        self.steps = 0

    def load(self, states: Sequence[OptimizerState | None]) -> None:
        """Continue each member's optimizer from its torch.optim state_dict (None: fresh).

        Every member has then taken the same number of steps: the bias corrections are shared.
        """
        counts = {optimizer_steps(state) for state in states}
        if len(counts) != 1:
            raise ValueError(f"stacked trainings continue optimizers at {sorted(counts)} steps")
        self.steps = counts.pop()
        for i, state in enumerate(states):
            if state is None:
                continue
            order = state["param_groups"][0]["params"]
            for index, slots in state["state"].items():
                if "exp_avg" in slots:
                    exp_avg, exp_avg_sq = self.moments[order.index(index)]
                    exp_avg[i].copy_(slots["exp_avg"])
                    exp_avg_sq[i].copy_(slots["exp_avg_sq"])

    def member_slots(self, i: int) -> list[dict[str, torch.Tensor]]:
        """Member i's state per parameter, as torch.optim's Adam keeps it (SGD: none)."""
        if self.kind == "sgd" or self.steps == 0:
            return []
        step = torch.tensor(float(self.steps), dtype=torch.float32)
        return [
            {"step": step.clone(), "exp_avg": m[i].clone(), "exp_avg_sq": v[i].clone()}
            for m, v in self.moments
        ]

    def zero_grad(self, keep: bool = False) -> None:
        """Drop the gradients, or (`keep`) zero them in place for backwards that add to them."""
        for p in self.params:
            if not keep:
                p.grad = None
            elif p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad.zero_()

    @torch.no_grad()
    def step(self, learning_rates: torch.Tensor) -> None:
        """One step of every member at its own learning rate (k,): each parameter's arithmetic
        as in a loop over them, taken by torch's foreach functions over the list."""
        self.steps += 1
        k = learning_rates.shape[0]
        live = [
            (p, g, m)
            for p, m in zip(self.params, self.moments, strict=True)
            if (g := p.grad) is not None
        ]
        params, grads = [p for p, _, _ in live], [g for _, g, _ in live]
        scales = [self.scale_of[id(p)] for p in params]
        rates = [learning_rates.view(k, *([1] * (p.ndim - 1))) for p in params]
        if self.kind == "sgd":
            torch._foreach_sub_(
                params,
                torch._foreach_mul(grads, [r / s**2 for r, s in zip(rates, scales, strict=True)]),
            )
            return
        exp_avgs, exp_avg_sqs = [m for *_, (m, _) in live], [v for *_, (_, v) in live]
        torch._foreach_lerp_(exp_avgs, grads, 1 - BETA1)
        torch._foreach_mul_(exp_avg_sqs, BETA2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - BETA2)
        bias_correction1 = 1 - BETA1**self.steps
        bias_correction2_sqrt = (1 - BETA2**self.steps) ** 0.5
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, bias_correction2_sqrt)
        torch._foreach_add_(denom, [self.eps * s for s in scales])
        update = torch._foreach_div(exp_avgs, denom)
        torch._foreach_mul_(
            update, [r / s / bias_correction1 for r, s in zip(rates, scales, strict=True)]
        )
        torch._foreach_sub_(params, update)


def optimizer_steps(state: OptimizerState | None) -> int:
    """The steps an optimizer's state_dict has taken (0: fresh, or SGD's, which keeps none)."""
    if state is None:
        return 0
    steps = {int(slots["step"]) for slots in state["state"].values() if "step" in slots}
    if len(steps) > 1:
        raise ValueError(f"an optimizer state whose parameters took {sorted(steps)} steps")
    return steps.pop() if steps else 0
