"""The networks of a stack of k trainings as one: each weight on a leading axis.

The weights keep the layout of `Policy`'s state_dict (a layer's weight is (k, out, in)), so a
member's weights are a slice and the gradients come out where the weights are; the matrix
products are meta.algorithm.ppo.kernels'.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from meta.algorithm.ppo.kernels import linear, per_count
from meta.algorithm.ppo.policy import LOG_2PI, MLAGENTS_EPSILON, FrozenPolicy, forward, layers
from meta.algorithm.ppo.weights import Weights

NORMALIZER = ("normalizer.mean", "normalizer.var", "normalizer.count")
ROWS = 2048
"""Rows per piece of a buffer-wide pass (PolicyStack.values)."""


class PolicyStack:
    """The actor-critic of `Policy`, k times over: parameters (k, ...) that require grad.

    A stack of one is also how one member of a stack is read and moved on its own (`member`).
    """

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
        self.actor = layers(self.params, "actor.")
        self.critic = layers(self.params, "critic.")

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
        return forward(self.actor, x, linear)

    def value_from(self, x: torch.Tensor) -> torch.Tensor:
        """Values (k, n)."""
        return forward(self.critic, x, linear)[..., 0]

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
        member = self.member(i)
        return member.value_from(member.features(obs[None]))[0]

    def frozen(self, i: int = 0) -> FrozenPolicy:
        """Member i's current weights packed for acting alone, as a single network acts."""
        every = {**self.params, **self.buffers}
        return FrozenPolicy({key: every[key][i] for key in self.keys}, self.normalize, self.epsilon)

    def member(self, i: int) -> PolicyStack:
        """Member i as a stack of one: views of its weights, which it reads and moves in place."""
        return self.members(slice(i, i + 1))

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
        view.actor, view.critic = layers(view.params, "actor."), layers(view.params, "critic.")
        return view

    @torch.no_grad()
    def prime(self, prior: int) -> None:
        """Fresh normalisers start from `prior` observations at mean 0, variance 1."""
        if prior > 0:
            count = self.buffers["normalizer.count"]
            count.masked_fill_(count == 0.0, float(prior))

    @torch.no_grad()
    def update_normalizer(self, obs: torch.Tensor, prior: int) -> None:
        """Each member's normaliser, fresh ones primed with `prior` observations at mean 0 and
        variance 1 (ML-Agents' prior), merged with its (k, N, obs) (Chan et al.)."""
        self.prime(prior)
        mean, var, count = (self.buffers[key] for key in NORMALIZER)
        n = obs.shape[1]
        batch_mean = obs.mean(1)
        batch_var = obs.var(1, unbiased=False)
        total = (count + n)[:, None]
        delta = batch_mean - mean
        mean += delta * per_count(n, total)
        before = count[:, None]
        var.copy_((var * before + batch_var * n + delta.square() * before * n / total) / total)
        count.copy_(total[:, 0])

    def weights(self, i: int = 0) -> Weights:
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
