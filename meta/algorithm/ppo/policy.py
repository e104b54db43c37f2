"""A network's weights: an actor-critic MLP with a Gaussian head and a running observation
normaliser, fresh from a seed (`Policy`), and packed for acting (`FrozenPolicy`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping

import torch
from torch import nn
from torch.nn import functional as F

from envs.interface import AgentEnvironment
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


def policy_for(env: AgentEnvironment, network: NetworkConfig, seed: int = 0) -> Policy:
    """A fresh policy sized for the env's (single) behavior."""
    spec = next(iter(env.behavior_specs.values()))
    return make_policy(
        spec.observation_specs[0].shape[0], spec.action_spec.continuous_size, network, seed
    )


def policy_with(weights: Mapping[str, torch.Tensor], cfg: NetworkConfig) -> Policy:
    """A policy holding `weights`, sized by them (observations: the normaliser's, actions: σ's)."""
    obs_size, action_size = weights["normalizer.mean"].shape[0], weights["log_std"].shape[0]
    policy = make_policy(obs_size, action_size, cfg, seed=0)
    policy.load_state_dict(weights)
    return policy
