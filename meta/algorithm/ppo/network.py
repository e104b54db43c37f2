"""The actor-critic network: one network's weights, and a stack of k trainings' as one.

`Policy` is an actor-critic MLP with a Gaussian head and a running observation normaliser, fresh
from a seed; `FrozenPolicy`, its weights packed for acting. `PolicyStack` holds k members'
weights on a leading axis, in the layout of `Policy`'s state_dict (a layer's weight is
(k, out, in)), so a member's weights are a slice and the gradients come out where the weights
are; the matrix products are meta.algorithm.ppo.kernels'. One member is a stack of one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.kernels import linear, per_count
from meta.algorithm.ppo.weights import Weights
from meta.config.ppo import NetworkConfig
from meta.process.compute import torch_threads

LOG_2PI = math.log(2.0 * math.pi)
MLAGENTS_EPSILON = 1e-7
"""What ML-Agents adds inside its Gaussian entropy's logarithm (torch_entities/distributions.py)."""


class Normalizer(nn.Module):
    """Running mean and variance of observations; buffers, so they live in the state_dict.

    Reptile interpolates these buffers like weights: the start it learns includes the
    statistics its inner trainings saw.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        self.register_buffer("count", torch.zeros(()))


def mlp(inputs: int, hidden: int, layers: int, outputs: int, out_gain: float) -> nn.Sequential:
    """MLP with SiLU (ML-Agents' Swish) and orthogonal init; `out_gain` scales the last layer."""
    sizes = [inputs] + [hidden] * layers
    modules: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        modules += [_linear(fan_in, fan_out, math.sqrt(2.0)), nn.SiLU()]
    modules.append(_linear(sizes[-1], outputs, out_gain))
    return nn.Sequential(*modules)


def _linear(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


@torch.no_grad()
def mlagents_initialise(actor: nn.Sequential, critic: nn.Sequential) -> None:
    """ML-Agents 1.1.0's fresh weights (torch_entities/layers.py, distributions.py, decoders.py).

    Hidden layers Kaiming-normal for a linear unit (std 1/sqrt(fan_in)); the mean layer the same
    times 0.2, divided by 3 into the environment's units (its actions are divided by 3); the
    value head Xavier-uniform; every bias 0.
    """
    for net in (actor, critic):
        for layer in (m for m in net if isinstance(m, nn.Linear)):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="linear")
            nn.init.zeros_(layer.bias)
    mean_layer, value_head = actor[-1], critic[-1]
    assert isinstance(mean_layer, nn.Linear) and isinstance(value_head, nn.Linear)
    mean_layer.weight.mul_(0.2 / 3.0)
    nn.init.xavier_uniform_(value_head.weight)


class Policy(nn.Module):
    """One network's weights as a module (fresh, loaded, mapped to ML-Agents'): separate actor
    and critic bodies (ML-Agents' default), a state-independent log std. PolicyStack computes
    with them, FrozenPolicy acts with them."""

    def __init__(self, obs_size: int, action_size: int, cfg: NetworkConfig) -> None:
        super().__init__()
        self.network, self.normalize, self.epsilon = cfg, cfg.normalize, cfg.normalizer_epsilon
        self.normalizer = Normalizer(obs_size)
        self.actor = mlp(obs_size, cfg.hidden_units, cfg.num_layers, action_size, 0.01)
        self.critic = mlp(obs_size, cfg.hidden_units, cfg.num_layers, 1, 1.0)
        self.log_std = nn.Parameter(torch.full((action_size,), float(cfg.initial_log_std)))
        if cfg.initialization == "mlagents":
            mlagents_initialise(self.actor, self.critic)

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return self.log_std.device

    def frozen(self) -> FrozenPolicy:
        """The current weights packed for acting; stale once the weights change."""
        named = {**dict(self.named_parameters()), **dict(self.named_buffers())}
        return FrozenPolicy(named, self.normalize, self.epsilon)


Layers = list[tuple[torch.Tensor, torch.Tensor]]


def layers(weights: Mapping[str, torch.Tensor], prefix: str) -> Layers:
    """The (weight, bias) pairs of one MLP (`actor.`, `critic.`) of a state_dict, in order."""
    names = [
        k[: -len(".weight")] for k in weights if k.startswith(prefix) and k.endswith(".weight")
    ]
    return [(weights[f"{n}.weight"], weights[f"{n}.bias"]) for n in names]


def forward(
    net: Layers, x: torch.Tensor, product: Callable[..., torch.Tensor], inplace: bool = False
) -> torch.Tensor:
    """The MLP on `x`, `product(x, weight, bias)` a layer: SiLU between layers, none after."""
    *hidden, (weight, bias) = net
    for w, b in hidden:
        x = F.silu(product(x, w, b), inplace=inplace)
    return product(x, weight, bias)


def gaussian_log_prob(
    action: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, per_dimension: bool = False
) -> torch.Tensor:
    """Log-density of a diagonal Gaussian, summed over action dimensions (or one per dimension)."""
    z = (action - mean) * torch.exp(-log_std)
    log_density = -0.5 * z.square() - log_std - 0.5 * LOG_2PI
    return log_density if per_dimension else log_density.sum(-1)


class FrozenPolicy:
    """A policy's weights, transposed once, for many batched forward passes without autograd.

    Collection calls the policy once per environment step with a small batch: there, the
    per-call work (transposes, normaliser factors, module dispatch) costs as much as the math.
    """

    def __init__(
        self, weights: Mapping[str, torch.Tensor], normalize: bool, epsilon: float
    ) -> None:
        """`weights`: a policy's state_dict, or views of it (a stack's member)."""
        with torch.no_grad():
            self.shift = weights["normalizer.mean"].clone() if normalize else None
            self.scale = torch.rsqrt(weights["normalizer.var"] + epsilon)
            self.actor, self.critic = (
                [(w.detach().t().contiguous(), b.detach().clone()) for w, b in layers(weights, net)]
                for net in ("actor.", "critic.")
            )
            log_std = weights["log_std"]
            self.std = log_std.exp()
            self.log_prob_base = -(log_std + 0.5 * LOG_2PI).sum()

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the networks see them (normalised and clipped when enabled)."""
        if self.shift is None:
            return obs
        return torch.sub(obs, self.shift).mul_(self.scale).clamp_(-5.0, 5.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s), shape (batch,)."""
        with torch.inference_mode():
            return forward(self.critic, self.features(obs), _addmm, True)[:, 0]

    @torch.inference_mode()
    def act(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions; returns (action, log-prob, value)."""
        x = self.features(obs)
        mean = forward(self.actor, x, _addmm, True)
        value = forward(self.critic, x, _addmm, True)[:, 0]
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        action = torch.addcmul(mean, self.std, noise)
        # (action - mean) / std is the noise itself: the log-density needs no subtraction
        log_prob = noise.square_().sum(-1).mul_(-0.5).add_(self.log_prob_base)
        return action, log_prob, value


def _addmm(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.addmm(bias, x, weight_t)


def make_policy(obs_size: int, action_size: int, cfg: NetworkConfig, seed: int) -> Policy:
    """A freshly initialised policy; the seed alone decides its weights."""
    # One thread: a multi-threaded QR (orthogonal init) would round differently.
    with torch.random.fork_rng(devices=[]), torch_threads(1):
        torch.manual_seed(seed)
        return Policy(obs_size, action_size, cfg)


def sizes_of(env: AgentEnvironment) -> tuple[int, int]:
    """The observation and action sizes of the env's (single) behavior."""
    spec = next(iter(env.behavior_specs.values()))
    return spec.observation_specs[0].shape[0], spec.action_spec.continuous_size


def policy_for(env: AgentEnvironment, network: NetworkConfig, seed: int = 0) -> Policy:
    """A fresh policy sized for the env's (single) behavior."""
    return make_policy(*sizes_of(env), network, seed)


def policy_with(weights: Mapping[str, torch.Tensor], cfg: NetworkConfig) -> Policy:
    """A policy holding `weights`, sized by them (observations: the normaliser's, actions: σ's)."""
    obs_size, action_size = weights["normalizer.mean"].shape[0], weights["log_std"].shape[0]
    policy = make_policy(obs_size, action_size, cfg, seed=0)
    policy.load_state_dict(weights)
    return policy


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
