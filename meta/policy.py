"""Actor-critic MLP with a Gaussian head and a running observation normaliser."""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from meta.config import NetworkConfig

LOG_2PI = math.log(2.0 * math.pi)


class Normalizer(nn.Module):
    """Running mean and variance of observations; buffers, so they live in the state_dict.

    Reptile interpolates these buffers like weights: the start it learns includes the
    statistics its inner trainings saw.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalise and clip to [-5, 5] as ML-Agents does."""
        return torch.clamp((obs - self.mean) * torch.rsqrt(self.var + 1e-8), -5.0, 5.0)

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


class Policy(nn.Module):
    """Separate actor and critic bodies (ML-Agents' default); state-independent log std."""

    def __init__(self, obs_size: int, action_size: int, cfg: NetworkConfig) -> None:
        super().__init__()
        self.normalize = cfg.normalize
        self.normalizer = Normalizer(obs_size)
        self.actor = mlp(obs_size, cfg.hidden_units, cfg.num_layers, action_size, 0.01)
        self.critic = mlp(obs_size, cfg.hidden_units, cfg.num_layers, 1, 1.0)
        self.log_std = nn.Parameter(torch.zeros(action_size))

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.normalizer(obs) if self.normalize else obs

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s), shape (batch,)."""
        return self.critic(self._features(obs)).squeeze(-1)

    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions; returns (action, log-prob, value) in one pass."""
        x = self._features(obs)
        mean = self.actor(x)
        std = self.log_std.exp()
        if deterministic:
            action = mean
        else:
            noise = torch.randn(
                mean.shape, generator=generator, device=mean.device, dtype=mean.dtype
            )
            action = mean + std * noise
        log_prob = gaussian_log_prob(action, mean, self.log_std)
        return action, log_prob, self.critic(x).squeeze(-1)

    def evaluate(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob of `action`, entropy (per sample) and value, for the PPO update."""
        x = self._features(obs)
        mean = self.actor(x)
        log_prob = gaussian_log_prob(action, mean, self.log_std)
        entropy = (0.5 * (1.0 + LOG_2PI) + self.log_std).sum().expand(obs.shape[0])
        return log_prob, entropy, self.critic(x).squeeze(-1)


def gaussian_log_prob(
    action: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """Log-density of a diagonal Gaussian, summed over action dimensions."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - 0.5 * LOG_2PI).sum(-1)


def make_policy(obs_size: int, action_size: int, cfg: NetworkConfig, seed: int) -> Policy:
    """A freshly initialised policy; the seed alone decides its weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Policy(obs_size, action_size, cfg)
