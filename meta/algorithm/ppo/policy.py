"""Actor-critic MLP with a Gaussian head and a running observation normaliser."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import torch
from torch import nn
from torch.nn import functional as F

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.config import NetworkConfig
from meta.runtime.threads import torch_threads

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

    def __init__(self, size: int, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.epsilon = epsilon
        """Added to the variance before its square root (a setting, not in the state_dict)."""
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalise and clip to [-5, 5] as ML-Agents does."""
        return torch.clamp((obs - self.mean) * torch.rsqrt(self.var + self.epsilon), -5.0, 5.0)

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Merge a batch's moments into the running ones (Chan et al. parallel update)."""
        n = batch.shape[0]
        batch_mean = batch.mean(0)
        batch_var = batch.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * (n / total)
        self.var.copy_(
            (self.var * self.count + batch_var * n + delta.square() * self.count * n / total)
            / total
        )
        self.count.copy_(total)


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
    """Separate actor and critic bodies (ML-Agents' default); state-independent log std."""

    def __init__(self, obs_size: int, action_size: int, cfg: NetworkConfig) -> None:
        super().__init__()
        self.normalize = cfg.normalize
        self.normalizer = Normalizer(obs_size, cfg.normalizer_epsilon)
        self.actor = mlp(obs_size, cfg.hidden_units, cfg.num_layers, action_size, 0.01)
        self.critic = mlp(obs_size, cfg.hidden_units, cfg.num_layers, 1, 1.0)
        self.log_std = nn.Parameter(torch.full((action_size,), float(cfg.initial_log_std)))
        if cfg.initialization == "mlagents":
            mlagents_initialise(self.actor, self.critic)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the networks see them (normalised and clipped when enabled)."""
        return self.normalizer(obs) if self.normalize else obs

    def mean_from(self, x: torch.Tensor) -> torch.Tensor:
        """Action mean (batch, actions) of features `x`."""
        return _run(self.actor, x)

    def value_from(self, x: torch.Tensor) -> torch.Tensor:
        """Value (batch,) of features `x`."""
        return _run(self.critic, x)[:, 0]

    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions; returns (action, log-prob, value) in one pass."""
        x = self.features(obs)
        mean, value = self.mean_from(x), self.value_from(x)
        if deterministic:
            action = mean
        else:
            noise = torch.randn(
                mean.shape, generator=generator, device=mean.device, dtype=mean.dtype
            )
            action = mean + self.log_std.exp() * noise
        return action, gaussian_log_prob(action, mean, self.log_std), value

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return self.log_std.device

    @property
    def epsilon(self) -> float:
        """What the normaliser adds to the variance before its square root."""
        return self.normalizer.epsilon

    def frozen(self) -> FrozenPolicy:
        """The current weights packed for acting; stale once the weights change."""
        named = {**dict(self.named_parameters()), **dict(self.named_buffers())}
        return FrozenPolicy(named, self.normalize, self.normalizer.epsilon)


def _run(net: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """The MLP on `x`, without nn.Module dispatch."""
    *hidden, last = (m for m in net if isinstance(m, nn.Linear))
    for layer in hidden:
        x = F.silu(F.linear(x, layer.weight, layer.bias))
    return F.linear(x, last.weight, last.bias)


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
            self.actor = _packed(weights, "actor.")
            self.critic = _packed(weights, "critic.")
            log_std = weights["log_std"]
            self.std = log_std.exp()
            self.log_prob_base = -(log_std + 0.5 * LOG_2PI).sum()

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Policy.features, bitwise."""
        if self.shift is None:
            return obs
        return torch.sub(obs, self.shift).mul_(self.scale).clamp_(-5.0, 5.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s), shape (batch,)."""
        with torch.inference_mode():
            return _run_packed(self.critic, self.features(obs))[:, 0]

    @torch.inference_mode()
    def act(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions; returns (action, log-prob, value) as Policy.act does."""
        x = self.features(obs)
        mean, value = _run_packed(self.actor, x), _run_packed(self.critic, x)[:, 0]
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        action = torch.addcmul(mean, self.std, noise)
        # (action - mean) / std is the noise itself: the log-density needs no subtraction
        log_prob = noise.square_().sum(-1).mul_(-0.5).add_(self.log_prob_base)
        return action, log_prob, value


def _packed(
    weights: Mapping[str, torch.Tensor], prefix: str
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One MLP's layers in order, each (W^T contiguous, b)."""
    names = [
        k[: -len(".weight")] for k in weights if k.startswith(prefix) and k.endswith(".weight")
    ]
    return [
        (weights[f"{n}.weight"].detach().t().contiguous(), weights[f"{n}.bias"].detach().clone())
        for n in names
    ]


def _run_packed(layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
    *hidden, (weight, bias) = layers
    for w, b in hidden:
        x = F.silu(torch.addmm(b, x, w), inplace=True)
    return torch.addmm(bias, x, weight)


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
