"""The policies of a stack of k trainings as one: each weight on a leading axis.

The weights keep the layout of `Policy`'s state_dict (a layer's weight is (k, out, in)), so a
member's weights are a slice and the gradients come out where the weights are. The arithmetic
is `Policy`'s, operation for operation, with a leading axis; the matrix products are
meta.algorithm.ppo.kernels', which a stack of one takes from a single network.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch.nn import functional as F

from meta.algorithm.ppo.kernels import linear, per_count
from meta.algorithm.ppo.policy import LOG_2PI, MLAGENTS_EPSILON, FrozenPolicy
from meta.algorithm.ppo.weights import Weights

NORMALIZER = ("normalizer.mean", "normalizer.var", "normalizer.count")
ROWS = 2048
"""Rows per piece of a buffer-wide pass (PolicyStack.values)."""


class PolicyStack:
    """The actor-critic of `Policy`, k times over: parameters (k, ...) that require grad."""

    def __init__(
        self, weights: Sequence[Weights], normalize: bool, epsilon: float, device: str
    ) -> None:
        self.keys = list(weights[0])
        self.k, self.normalize, self.epsilon = len(weights), normalize, epsilon
        stacked = {key: torch.stack([w[key] for w in weights]).to(device) for key in self.keys}
        self.buffers = {key: stacked[key] for key in NORMALIZER}
        self.params = {
            key: value.requires_grad_() for key, value in stacked.items() if key not in NORMALIZER
        }
        self.actor = _layers(self.params, "actor.")
        self.critic = _layers(self.params, "critic.")

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return self.params["log_std"].device

    @property
    def log_std(self) -> torch.Tensor:
        """(k, actions)."""
        return self.params["log_std"]

    def parameters(self) -> list[torch.Tensor]:
        """Every stacked parameter, in the state_dict's order."""
        return list(self.params.values())

    def zero_grad(self) -> None:
        """Drop the gradients."""
        for param in self.params.values():
            param.grad = None

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """(k, n, obs) as each member's networks see them (normalised and clipped)."""
        if not self.normalize:
            return obs
        mean, var = self.buffers["normalizer.mean"], self.buffers["normalizer.var"]
        scale = torch.rsqrt(var + self.epsilon)
        return torch.clamp((obs - mean[:, None]) * scale[:, None], -5.0, 5.0)

    def mean_from(self, x: torch.Tensor) -> torch.Tensor:
        """Action means (k, n, actions)."""
        return _run(self.actor, x)

    def value_from(self, x: torch.Tensor) -> torch.Tensor:
        """Values (k, n)."""
        return _run(self.critic, x)[..., 0]

    def entropy(
        self, mean_over_dimensions: bool, log_std: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Each member's entropy bonus (k,): summed, or ML-Agents' mean over dimensions; of
        `log_std` ((k, ..., actions), a view of the stack's) where given."""
        log_std = self.log_std if log_std is None else log_std
        if mean_over_dimensions:
            variance = torch.exp(2.0 * log_std)
            entropy = (
                0.5 * torch.log(2.0 * torch.pi * torch.e * variance + MLAGENTS_EPSILON)
            ).mean(-1)
        else:
            entropy = (0.5 * (1.0 + LOG_2PI) + log_std).sum(-1)
        return entropy.reshape(self.k)

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, generators: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every member's sampled actions, log-probabilities and values for (k, n, obs)."""
        if self.k == 1:
            action, log_prob, value = self.frozen(0).act(obs[0], generators[0])
            return action[None], log_prob[None], value[None]
        x = self.features(obs)
        mean, value = self.mean_from(x), self.value_from(x)
        shape = mean.shape[1:]
        noise = torch.stack(
            [
                torch.randn(shape, generator=g, device=mean.device, dtype=mean.dtype)
                for g in generators
            ]
        )
        std = self.log_std.exp()[:, None]
        action = torch.addcmul(mean, std, noise)
        base = -(self.log_std + 0.5 * LOG_2PI).sum(-1)
        log_prob = noise.square().sum(-1).mul(-0.5).add(base[:, None])
        return action, log_prob, value

    @torch.no_grad()
    def member_value(self, i: int, obs: torch.Tensor) -> torch.Tensor:
        """Member i's V(s) of (batch, obs), (batch,)."""
        if self.k == 1:
            return self.frozen(0).value(obs)
        member = self.members(slice(i, i + 1))
        return member.value_from(member.features(obs[None]))[0]

    def frozen(self, i: int) -> FrozenPolicy:
        """Member i's current weights packed for acting alone, as a single network acts."""
        every = {**self.params, **self.buffers}
        return FrozenPolicy({key: every[key][i] for key in self.keys}, self.normalize, self.epsilon)

    def member(self, i: int) -> Member:
        """Member i as one policy: views of its weights, which it reads and moves in place."""
        return Member(self, i)

    @torch.no_grad()
    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """Values (k, n) of a whole buffer's (k, n, obs), by pieces of 2 or 3 members and ROWS
        rows whose activations stay in the cache (the same bits as one pass)."""
        k, n = obs.shape[:2]
        if k == 1:
            return self.frozen(0).value(obs[0])[None]
        out = torch.empty(k, n, device=obs.device, dtype=obs.dtype)
        for part in pieces(k, 2):
            piece = self.members(part)
            for r in range(0, n, ROWS):
                out[part, r : r + ROWS] = piece.value_from(piece.features(obs[part, r : r + ROWS]))
        return out

    def members(self, part: slice, leaves: bool = False) -> PolicyStack:
        """The members in `part` as a stacked policy of views of these weights; `leaves`: each
        view a leaf whose gradient is a view of the stacked gradient, which a backward adds to
        in place (it must exist), instead of a stacked-size gradient per backward."""
        view = object.__new__(PolicyStack)
        view.keys, view.normalize, view.epsilon = self.keys, self.normalize, self.epsilon
        view.buffers = {key: value[part] for key, value in self.buffers.items()}
        view.params = {key: value[part] for key, value in self.params.items()}
        if leaves:
            for key, value in view.params.items():
                leaf = value.detach().requires_grad_()
                leaf.grad = self.params[key].grad[part]  # type: ignore[index]
                view.params[key] = leaf
        view.k = view.params["log_std"].shape[0]
        view.actor, view.critic = _layers(view.params, "actor."), _layers(view.params, "critic.")
        return view

    @torch.no_grad()
    def update_normalizer(self, obs: torch.Tensor, prior: int) -> None:
        """Each member's normaliser, fresh ones primed with `prior` observations at mean 0 and
        variance 1 (ML-Agents' prior), merged with its (k, N, obs) (Chan et al.)."""
        mean, var, count = (self.buffers[key] for key in NORMALIZER)
        if prior > 0:
            count.masked_fill_(count == 0.0, float(prior))
        n = obs.shape[1]
        batch_mean = obs.mean(1)
        batch_var = obs.var(1, unbiased=False)
        total = (count + n)[:, None]
        delta = batch_mean - mean
        mean += delta * per_count(n, total)
        before = count[:, None]
        var.copy_((var * before + batch_var * n + delta.square() * before * n / total) / total)
        count.copy_(total[:, 0])

    def weights(self, i: int) -> Weights:
        """Member i's state_dict, on the CPU, as `Policy.state_dict()` orders it."""
        every = {**self.params, **self.buffers}
        return {key: every[key][i].detach().to("cpu", copy=True) for key in self.keys}


def pieces(k: int, most: int) -> list[slice]:
    """0..k cut into contiguous pieces of near-equal size, `most` to 2·most−1 members each (k if
    fewer): never a piece of one member out of several, which would take another kernel."""
    return near_equal(k, max(k // most, 1))


def near_equal(n: int, parts: int) -> list[slice]:
    """0..n cut into `parts` contiguous slices whose sizes differ by one at most (none empty)."""
    size, extra = divmod(n, parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [slice(a, b) for a, b in itertools.pairwise(bounds) if b > a]


Layers = list[tuple[torch.Tensor, torch.Tensor]]


def _layers(params: dict[str, torch.Tensor], prefix: str) -> Layers:
    """The (weight, bias) pairs of one MLP, in order."""
    names = [
        key[: -len(".weight")]
        for key in params
        if key.startswith(prefix) and key.endswith(".weight")
    ]
    return [(params[f"{name}.weight"], params[f"{name}.bias"]) for name in names]


def _run(layers: Layers, x: torch.Tensor) -> torch.Tensor:
    """The MLP on (k, n, inputs): SiLU between the layers, none after the last."""
    *hidden, (weight, bias) = layers
    for w, b in hidden:
        x = F.silu(linear(x, w, b))
    return linear(x, weight, bias)


class Member:
    """Member i of a stack as one policy of (batch, ...) tensors: what a collector that steps
    one environment, the pieces' normaliser and a game's ghost read and move."""

    def __init__(self, stack: PolicyStack, i: int) -> None:
        self.stack, self.i = stack, i
        self.view = stack.members(slice(i, i + 1))
        self.normalize, self.epsilon = stack.normalize, stack.epsilon
        self.mean, self.var, self.count = (stack.buffers[key][i] for key in NORMALIZER)

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return self.stack.device

    @property
    def log_std(self) -> torch.Tensor:
        """(actions,)."""
        return self.view.log_std[0]

    def frozen(self) -> FrozenPolicy:
        """The member's current weights packed for acting."""
        return self.stack.frozen(self.i)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """(batch, obs) as the member's networks see them."""
        return self.view.features(obs[None])[0]

    def mean_from(self, x: torch.Tensor) -> torch.Tensor:
        """Action means (batch, actions) of features `x`."""
        return self.view.mean_from(x[None])[0]

    def value_from(self, x: torch.Tensor) -> torch.Tensor:
        """Values (batch,) of features `x`."""
        return self.view.value_from(x[None])[0]

    @torch.no_grad()
    def prime(self, prior: int) -> None:
        """A fresh normaliser starts from `prior` observations at mean 0, variance 1."""
        if prior > 0 and float(self.count) == 0.0:
            self.count.fill_(float(prior))

    def weights(self) -> Weights:
        """The member's state_dict on the CPU."""
        return self.stack.weights(self.i)
