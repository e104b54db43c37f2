"""The optimizer of a stack: Adam or SGD, each member with its own learning rate and state.

A stack of one steps as torch.optim does (Adam through its step function), a stack of several
through the same formulas over the stacked parameters (foreach); neither builds a
``torch.optim.Optimizer``, whose methods import ``torch._dynamo`` (about 2 s a process). Adam's
step function is private to torch: pyproject.toml bounds torch and a test checks its signature.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.optim.adam import adam

OptimizerState = dict[str, Any]
"""An optimizer's state_dict (Adam's moments and step counts), on the CPU."""
BETA1, BETA2 = 0.9, 0.999


def state_dict(
    kind: str,
    count: int,
    lr: float,
    eps: float = 1e-8,
    fused: bool | None = None,
    state: dict[int, dict[str, torch.Tensor]] | None = None,
) -> OptimizerState:
    """torch.optim.Adam's (`kind` "adam") or SGD's state_dict over `count` parameters."""
    group: dict[str, Any]
    if kind == "sgd":
        group = {"lr": lr, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False}
        group |= {"maximize": False, "foreach": None, "differentiable": False, "fused": None}
    else:
        group = {"lr": lr, "betas": (BETA1, BETA2), "eps": eps, "weight_decay": 0}
        group |= {"amsgrad": False, "maximize": False, "foreach": None, "capturable": False}
        group |= {"differentiable": False, "fused": fused, "decoupled_weight_decay": False}
    return {"state": state or {}, "param_groups": [{**group, "params": list(range(count))}]}


class StackOptimizer:
    """`adam` or `sgd` over a stack's parameters (k, ...), each member's state its own.

    `scaled` parameters step as they would stored times `scale` (ppo.action_scale): Adam at
    lr / scale and eps * scale, SGD at lr / scale^2.
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
        self.k = params[0].shape[0]
        self.scale_of = {id(p): (scale if any(p is s for s in scaled) else 1.0) for p in params}
        adam_ = kind == "adam"
        self.moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params if adam_]
        self.steps = [0] * self.k
        self.counts = [
            torch.zeros((), dtype=torch.float32, device=p.device)
            for p in params
            if adam_ and self.k == 1
        ]
        """A stack of one: fused Adam's step count of each parameter, on its device."""

    def load(self, states: Sequence[OptimizerState | None]) -> None:
        """Continue each member's optimizer from its torch.optim state_dict (None: fresh)."""
        for i, state in enumerate(states):
            self.steps[i] = optimizer_steps(state)
            if state is None:
                continue
            groups = state["param_groups"]
            if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
                raise ValueError(
                    f"optimizer state for {[len(g['params']) for g in groups]} parameters in "
                    f"{len(groups)} group(s); this optimizer has {len(self.params)} in one"
                )
            for index, slots in state["state"].items():
                if "exp_avg" in slots:
                    exp_avg, exp_avg_sq = self.moments[groups[0]["params"].index(index)]
                    exp_avg[i].copy_(slots["exp_avg"])
                    exp_avg_sq[i].copy_(slots["exp_avg_sq"])
        for count in self.counts:
            count.fill_(float(self.steps[0]))

    def member_state(self, i: int, learning_rate: float) -> OptimizerState:
        """Member i's optimizer as torch.optim's state_dict over one policy's parameters, on
        the CPU, its learning rate the last step's."""
        slots = {}
        if self.kind == "adam" and self.steps[i] > 0:
            step = torch.tensor(float(self.steps[i]))
            slots = {
                j: {
                    "step": step.clone(),
                    "exp_avg": m[i].cpu().clone(),
                    "exp_avg_sq": v[i].cpu().clone(),
                }
                for j, (m, v) in enumerate(self.moments)
            }
        return state_dict(self.kind, len(self.params), learning_rate, self.eps, True, slots)

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
    def step(self, learning_rates: Sequence[float], active: Sequence[bool] | None = None) -> None:
        """One step of every member at its own learning rate; of the `active` ones alone
        where given (the others' weights, moments and step counts stay as they are)."""
        if active is None or all(active):
            self._step(learning_rates)
            return
        idle = torch.tensor([not a for a in active], device=self.params[0].device)
        # a stack of several: a stack of one never sits a step out
        held = [*self.params, *(x for moments in self.moments for x in moments)]
        kept = [x[idle].clone() for x in held]
        steps = self.steps
        self._step(learning_rates)
        self.steps = [s + 1 if a else s for s, a in zip(steps, active, strict=True)]
        for x, old in zip(held, kept, strict=True):
            x[idle] = old

    def _step(self, learning_rates: Sequence[float]) -> None:
        """One step of every member."""
        self.steps = [s + 1 for s in self.steps]
        if self.k == 1:
            self._step_one(learning_rates[0])
            return
        k = self.k
        lr = torch.tensor(learning_rates, device=self.params[0].device)
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in live]
        grads: list[torch.Tensor] = [p.grad for p in params]  # type: ignore[misc]
        scales = [self.scale_of[id(p)] for p in params]
        rates = [lr.view(k, *([1] * (p.ndim - 1))) for p in params]
        if self.kind == "sgd":
            torch._foreach_sub_(
                params,
                torch._foreach_mul(grads, [r / s**2 for r, s in zip(rates, scales, strict=True)]),
            )
            return
        count = torch.tensor(self.steps, dtype=torch.float64)
        correction1 = (1 - BETA1**count).to(lr.dtype)
        correction2_sqrt = ((1 - BETA2**count) ** 0.5).to(lr.dtype)
        exp_avgs = [self.moments[i][0] for i in live]
        exp_avg_sqs = [self.moments[i][1] for i in live]
        torch._foreach_lerp_(exp_avgs, grads, 1 - BETA1)
        torch._foreach_mul_(exp_avg_sqs, BETA2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - BETA2)
        shape = [correction2_sqrt.view(k, *([1] * (p.ndim - 1))) for p in params]
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, shape)
        torch._foreach_add_(denom, [self.eps * s for s in scales])
        update = torch._foreach_div(exp_avgs, denom)
        first = [correction1.view(k, *([1] * (p.ndim - 1))) for p in params]
        torch._foreach_mul_(
            update, [r / s / c for r, s, c in zip(rates, scales, first, strict=True)]
        )
        torch._foreach_sub_(params, update)

    def _step_one(self, lr: float) -> None:
        """A stack of one: torch.optim's steps, one call per scale of the parameters."""
        for scale in dict.fromkeys(self.scale_of.values()):
            live = [
                i
                for i, p in enumerate(self.params)
                if p.grad is not None and self.scale_of[id(p)] == scale
            ]
            params = [self.params[i] for i in live]
            grads: list[torch.Tensor] = [p.grad for p in params]  # type: ignore[misc]
            if not params:
                continue
            if self.kind == "sgd":  # torch.optim.sgd's step without momentum
                for param, grad in zip(params, grads, strict=True):
                    param.add_(grad, alpha=-lr / scale**2)
                continue
            adam(
                params,
                grads,
                [self.moments[i][0] for i in live],
                [self.moments[i][1] for i in live],
                [],
                [self.counts[i] for i in live],
                amsgrad=False,
                has_complex=False,
                beta1=BETA1,
                beta2=BETA2,
                lr=lr / scale,
                weight_decay=0,
                eps=self.eps * scale,
                maximize=False,
                foreach=None,
                capturable=False,
                differentiable=False,
                fused=True,
                grad_scale=None,
                found_inf=None,
                decoupled_weight_decay=False,
            )


def optimizer_steps(state: OptimizerState | None) -> int:
    """The steps an optimizer's state_dict has taken (0: fresh, or SGD's, which keeps none)."""
    if state is None:
        return 0
    steps = {int(slots["step"]) for slots in state["state"].values() if "step" in slots}
    if len(steps) > 1:
        raise ValueError(f"an optimizer state whose parameters took {sorted(steps)} steps")
    return steps.pop() if steps else 0
