"""The optimizers of a stack: Adam and SGD, each member with its own learning rate and state.

A stack of one steps with torch.optim's own arithmetic (its fused Adam), a stack of several
with the same formulas over the stacked parameters (torch's foreach functions), each member
at its own learning rate and step count (meta.algorithm.ppo.kernels says why two).

`Adam` and `SGD` are torch.optim's, without torch.optim.Optimizer's start-up cost.

Every method of ``torch.optim.Optimizer`` (its constructor included) imports ``torch._dynamo``
on first use, which takes about 2 s of each training process here, and this harness never
compiles. These classes hold the same parameter group and state as ``torch.optim.Adam`` and
``torch.optim.SGD`` and step through the same functions those call (``torch.optim.adam.adam``,
``torch.optim.sgd.sgd``) with the same arguments, so every step gives the same numbers, bit
for bit, and a ``state_dict`` of either loads into the other (tests/algorithm/test_optim.py).
Those two functions are private to torch and their parameters change between releases, so
pyproject.toml bounds torch to the releases the tests ran on, and a test compares the
arguments passed here with their signatures.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.optim.adam import adam
from torch.optim.sgd import sgd

State = dict[str, Any]
OptimizerState = dict[str, Any]
"""An optimizer's state_dict (Adam's moments and step counts), on the CPU."""


class Optimizer:
    """One parameter group, its per-parameter state, and torch.optim's state_dict format."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        defaults: dict[str, Any],
        scaled: Iterable[torch.Tensor] = (),
        scale: float = 1.0,
    ) -> None:
        self.params: list[torch.Tensor] = list(params)
        self.scaled = {id(param) for param in scaled}
        """Parameters that step as they would if stored times `scale` (not in the state_dict)."""
        self.scale = scale
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = [{"params": self.params, **defaults}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @property
    def group(self) -> dict[str, Any]:
        """The one parameter group (its learning rate is set by the update)."""
        return self.param_groups[0]

    def zero_grad(self) -> None:
        """Drop the gradients, as torch.optim's default ``set_to_none=True`` does."""
        for param in self.params:
            param.grad = None

    def step(self) -> None:
        """One step of every parameter that has a gradient."""
        raise NotImplementedError

    def with_grads(self) -> list[torch.Tensor]:
        """The parameters that have a gradient, in order."""
        return [param for param in self.params if param.grad is not None]

    def split(self) -> list[tuple[list[torch.Tensor], float]]:
        """The parameters with a gradient in steps of one kind: (parameters, their scale)."""
        params = self.with_grads()
        if not self.scaled:
            return [(params, 1.0)]
        plain = [param for param in params if id(param) not in self.scaled]
        scaled = [param for param in params if id(param) in self.scaled]
        return [(group, scale) for group, scale in ((plain, 1.0), (scaled, self.scale)) if group]

    def state_dict(self) -> State:
        """``{"state": {index: slots}, "param_groups": [...]}``, as torch.optim gives it."""
        index = {id(param): i for i, param in enumerate(self.params)}
        return {
            "state": {index[id(param)]: slots for param, slots in self.state.items()},
            "param_groups": [{**_hyper(self.group), "params": list(range(len(self.params)))}],
        }

    def load_state_dict(self, state_dict: State) -> None:
        """Take a state_dict of this optimizer or torch.optim's over the same parameters."""
        groups = state_dict["param_groups"]
        check_groups(state_dict, len(self.params))
        steps_on_param = bool(groups[0].get("fused") or groups[0].get("capturable"))
        self.state = {}
        for i, slots in state_dict["state"].items():
            param = self.params[groups[0]["params"].index(i)]
            self.state[param] = {
                key: _placed(value, param, key == "step", steps_on_param)
                for key, value in slots.items()
            }
        self.param_groups = [{"params": self.params, **_hyper(groups[0])}]


def check_groups(state_dict: State, params: int) -> None:
    """ValueError unless an optimizer's state_dict is of one group of `params` parameters."""
    groups = state_dict["param_groups"]
    if len(groups) != 1 or len(groups[0]["params"]) != params:
        raise ValueError(
            f"optimizer state for {[len(g['params']) for g in groups]} parameters in "
            f"{len(groups)} group(s); this optimizer has {params} in one"
        )


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    """A parameter group's hyperparameters: all but its parameters."""
    return {k: v for k, v in group.items() if k != "params"}


def _placed(value: Any, param: torch.Tensor, is_step: bool, steps_on_param: bool) -> Any:
    """A state value on the parameter's device, cast as torch.optim casts it on load."""
    if not isinstance(value, torch.Tensor) or (is_step and not steps_on_param):
        return value
    if is_step:
        return value.to(dtype=torch.float32, device=param.device)
    if param.is_floating_point():
        return value.to(dtype=param.dtype, device=param.device)
    return value.to(device=param.device)


class Adam(Optimizer):
    """``torch.optim.Adam(params, lr, eps=eps, fused=fused)``, stepped by ``adam``.

    A parameter w in `scaled` steps as Adam would step p = scale * w (lr / scale, eps * scale).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        eps: float = 1e-8,
        fused: bool | None = None,
        scaled: Iterable[torch.Tensor] = (),
        scale: float = 1.0,
    ) -> None:
        super().__init__(
            params,
            {
                "lr": lr,
                "betas": (0.9, 0.999),
                "eps": eps,
                "weight_decay": 0,
                "amsgrad": False,
                "maximize": False,
                "foreach": None,
                "capturable": False,
                "differentiable": False,
                "fused": fused,
                "decoupled_weight_decay": False,
            },
            scaled,
            scale,
        )

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every parameter with a gradient (state made on its first)."""
        for params, scale in self.split():
            self._step(params, scale)

    def _step(self, params: list[torch.Tensor], scale: float) -> None:
        group = self.group
        slots = [self.state.get(param) or self._fresh(param) for param in params]
        beta1, beta2 = group["betas"]
        adam(
            params,
            [param.grad for param in params],  # type: ignore[misc]
            [s["exp_avg"] for s in slots],
            [s["exp_avg_sq"] for s in slots],
            [],
            [s["step"] for s in slots],
            amsgrad=group["amsgrad"],
            has_complex=any(torch.is_complex(param) for param in params),
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"] / scale if scale != 1.0 else group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"] * scale if scale != 1.0 else group["eps"],
            maximize=group["maximize"],
            foreach=group["foreach"],
            capturable=group["capturable"],
            differentiable=group["differentiable"],
            fused=group["fused"],
            grad_scale=None,
            found_inf=None,
            decoupled_weight_decay=group["decoupled_weight_decay"],
        )

    def _fresh(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        """Zero moments and step count, placed where torch.optim.Adam places them."""
        if self.group["fused"] or self.group["capturable"]:
            step = torch.zeros((), dtype=torch.float32, device=param.device)
        else:
            scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            step = torch.tensor(0.0, dtype=scalar, device="cpu")
        slots = {
            "step": step,
            "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
        }
        self.state[param] = slots
        return slots


class SGD(Optimizer):
    """``torch.optim.SGD(params, lr)``: plain steps, no state, stepped by ``sgd``.

    A parameter w in `scaled` steps as SGD would step p = scale * w (lr / scale^2).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        scaled: Iterable[torch.Tensor] = (),
        scale: float = 1.0,
    ) -> None:
        super().__init__(
            params,
            {
                "lr": lr,
                "momentum": 0,
                "dampening": 0,
                "weight_decay": 0,
                "nesterov": False,
                "maximize": False,
                "foreach": None,
                "differentiable": False,
                "fused": None,
            },
            scaled,
            scale,
        )

    @torch.no_grad()
    def step(self) -> None:
        """``param -= lr * grad`` for every parameter with a gradient."""
        for params, scale in self.split():
            self._step(params, scale)

    def _step(self, params: list[torch.Tensor], scale: float) -> None:
        group = self.group
        sgd(
            params,
            [param.grad for param in params],  # type: ignore[misc]
            [],
            has_sparse_grad=any(param.grad.is_sparse for param in params),  # type: ignore[union-attr]
            foreach=group["foreach"],
            fused=group["fused"],
            grad_scale=None,
            found_inf=None,
            weight_decay=group["weight_decay"],
            momentum=group["momentum"],
            lr=group["lr"] / scale**2 if scale != 1.0 else group["lr"],
            dampening=group["dampening"],
            nesterov=group["nesterov"],
            maximize=group["maximize"],
        )


BETA1, BETA2 = 0.9, 0.999


class StackOptimizer:
    """`adam` or `sgd` over a stack's parameters (k, ...), each member's state its own.

    `scaled` parameters step as they would stored times `scale` (ppo.action_scale): Adam at
    lr / scale and eps * scale, SGD at lr / scale^2. A member's state goes in and out as
    torch.optim's state_dict over one policy's parameters, the shapes without the stack axis.
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
        self.single: Optimizer | None = None
        if self.k == 1:
            scaled_ones = scaled if scale != 1.0 else []
            self.single = (
                SGD(params, lr=0.0, scaled=scaled_ones, scale=scale)
                if kind == "sgd"
                else Adam(params, lr=0.0, eps=eps, fused=True, scaled=scaled_ones, scale=scale)
            )
        self.scale_of = {id(p): (scale if any(p is s for s in scaled) else 1.0) for p in params}
        self.moments = (
            [] if self.single else [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
        )
        self.steps = [0] * self.k

    def load(self, states: Sequence[OptimizerState | None]) -> None:
        """Continue each member's optimizer from its torch.optim state_dict (None: fresh)."""
        if self.single is not None:
            if states[0] is not None:
                self.single.load_state_dict(_stacked_state(states[0]))
            self.steps = [optimizer_steps(states[0])]
            return
        for i, state in enumerate(states):
            self.steps[i] = optimizer_steps(state)
            if state is None:
                continue
            check_groups(state, len(self.params))
            order = state["param_groups"][0]["params"]
            for index, slots in state["state"].items():
                if "exp_avg" in slots:
                    exp_avg, exp_avg_sq = self.moments[order.index(index)]
                    exp_avg[i].copy_(slots["exp_avg"])
                    exp_avg_sq[i].copy_(slots["exp_avg_sq"])

    def member_state(self, i: int, learning_rate: float) -> OptimizerState:
        """Member i's optimizer as torch.optim's state_dict over one policy's parameters, on
        the CPU, its learning rate the last step's."""
        if self.single is not None:
            state = self.single.state_dict()
            state["param_groups"][0]["lr"] = learning_rate
            return _cpu(state, lambda x: x[0])
        alone = (
            SGD(self.params, lr=learning_rate)
            if self.kind == "sgd"
            else Adam(self.params, lr=learning_rate, eps=self.eps, fused=True)
        )
        if self.kind != "sgd" and self.steps[i] > 0:
            step = torch.tensor(float(self.steps[i]), dtype=torch.float32)
            alone.state = {
                p: {"step": step.clone(), "exp_avg": m[i : i + 1], "exp_avg_sq": v[i : i + 1]}
                for p, (m, v) in zip(self.params, self.moments, strict=True)
            }
        return _cpu(alone.state_dict(), lambda x: x[0])

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
        if not any(active):
            return
        idle = torch.tensor([not a for a in active], device=self.params[0].device)
        # a stack of several: the single network's optimizer never sits a step out
        held = [x for p, (m, v) in zip(self.params, self.moments, strict=True) for x in (p, m, v)]
        kept = [x[idle].clone() for x in held]
        steps = self.steps
        self._step(learning_rates)
        self.steps = [s + 1 if a else s for s, a in zip(steps, active, strict=True)]
        for x, old in zip(held, kept, strict=True):
            x[idle] = old

    def _step(self, learning_rates: Sequence[float]) -> None:
        """One step of every member."""
        steps = self.steps
        self.steps = [s + 1 for s in steps]
        if self.single is not None:
            self.single.group["lr"] = learning_rates[0]
            self.single.step()
            return
        k = self.k
        lr = torch.tensor(learning_rates, device=self.params[0].device)
        live = [
            (p, g, m)
            for p, m in zip(self.params, self.moments, strict=True)
            if (g := p.grad) is not None
        ]
        params, grads = [p for p, _, _ in live], [g for _, g, _ in live]
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
        exp_avgs, exp_avg_sqs = [m for *_, (m, _) in live], [v for *_, (_, v) in live]
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


def optimizer_steps(state: OptimizerState | None) -> int:
    """The steps an optimizer's state_dict has taken (0: fresh, or SGD's, which keeps none)."""
    if state is None:
        return 0
    steps = {int(slots["step"]) for slots in state["state"].values() if "step" in slots}
    if len(steps) > 1:
        raise ValueError(f"an optimizer state whose parameters took {sorted(steps)} steps")
    return steps.pop() if steps else 0


def _stacked_state(state: OptimizerState) -> OptimizerState:
    """One policy's optimizer state_dict with a stack axis of one on every moment."""
    out = copy.deepcopy(state)
    for slots in out["state"].values():
        for name in ("exp_avg", "exp_avg_sq"):
            if name in slots:
                slots[name] = slots[name][None]
    return out


def _cpu(state: OptimizerState, member: Any) -> OptimizerState:
    """A copy of a state_dict on the CPU, each moment `member(moment)`."""
    out = {"state": {}, "param_groups": copy.deepcopy(state["param_groups"])}
    for index, slots in state["state"].items():
        out["state"][index] = {
            name: (
                value.detach().to("cpu", copy=True)
                if name == "step"
                else member(value).detach().to("cpu", copy=True)
            )
            if isinstance(value, torch.Tensor)
            else value
            for name, value in slots.items()
        }
    return out
