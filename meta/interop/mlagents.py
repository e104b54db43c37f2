"""Our actor-critic's state_dict to and from the modules of an ML-Agents 1.1.0 PPO checkpoint.

ML-Agents saves `{"Policy": actor, "global_step": steps, "Optimizer:value_optimizer": Adam,
"Optimizer:critic": critic}`, each a state_dict. Its actor and critic are ours layer for layer
(SiLU MLPs, a state-independent log sigma), with two conventions apart, converted here so that
both act the same on the same observation:

- Actions: ML-Agents sends `clip(a, -3, 3) / 3` to the environment, we send `clip(a, -1, 1)`;
  its mean layer is ours times 3 and its log sigma ours plus ln 3.
- Normaliser: ML-Agents keeps `normalization_steps` (one more than the observations seen), the
  mean and `running_variance` (the sum of squared deviations, plus one) and divides by
  `sqrt(running_variance / normalization_steps)`; ours keeps count, mean and variance and
  multiplies by `rsqrt(var + 1e-8)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from meta.algorithm.ppo.optim import state_dict
from meta.algorithm.ppo.weights import Weights
from meta.config.ppo import NetworkConfig

POLICY, GLOBAL_STEP = "Policy", "global_step"
OPTIMIZER, CRITIC = "Optimizer:value_optimizer", "Optimizer:critic"
STEP_KEY = "_GlobalSteps__global_step"
BODY = "network_body._body_endoder.seq_layers"
MU = "action_model._continuous_distribution.mu"
LOG_SIGMA = "action_model._continuous_distribution.log_sigma"
VALUE_HEAD = "value_heads.value_heads.extrinsic"
NORMALIZERS = (
    "network_body.observation_encoder.processors.0.normalizer",
    "network_body.processors.0.normalizer",
)
"""ML-Agents' body holds its observation processors twice, so the normaliser has two names."""
MODEL_EXPORT_VERSION = 3.0
ACTION_SCALE = 3.0
VAR_EPSILON = 1e-8
"""What our normaliser adds to the variance (meta.algorithm.ppo.network.Normalizer)."""
ADAM_LR = 3e-4
"""The learning rate in the fresh Adam state we write; ML-Agents sets its own on every update."""


class InteropError(ValueError):
    """Weights that do not map between the two formats (one line naming what does not fit)."""


@dataclass(frozen=True)
class Network:
    """The sizes and settings that two networks must share to swap weights."""

    obs_size: int
    action_size: int
    hidden_units: int
    num_layers: int
    normalize: bool

    @classmethod
    def of_weights(cls, theta: Weights, normalize: bool) -> Network:
        """The network of our state_dict `theta` (normalisation is not in the weights)."""
        layers = sum(1 for key in theta if key.startswith("actor.") and key.endswith(".weight"))
        if layers < 2 or "log_std" not in theta or "actor.0.weight" not in theta:
            raise InteropError("not the state_dict of our actor-critic (no actor layers, log_std)")
        first = theta["actor.0.weight"]
        return cls(
            int(first.shape[1]),
            int(theta["log_std"].shape[0]),
            int(first.shape[0]),
            layers - 1,
            normalize,
        )

    def misfit(self, expected: Network, fields_to_check: tuple[str, ...] | None = None) -> str:
        """How this network differs from `expected`, as 'name A there, B here'; '' if it fits."""
        names = fields_to_check or tuple(f.name for f in fields(self))
        return "; ".join(
            f"{name} {_word(getattr(self, name))} there, {_word(getattr(expected, name))} here"
            for name in names
            if getattr(self, name) != getattr(expected, name)
        )


def settings_misfit(found: Network, network: NetworkConfig) -> str:
    """How `found` differs from the network settings (sizes of layers, normalisation)."""
    names = ("hidden_units", "num_layers", "normalize")
    expected = replace(found, **{name: getattr(network, name) for name in names})
    return found.misfit(expected, names)


def _word(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def is_mlagents(state: Mapping[str, Any]) -> bool:
    """Whether a loaded checkpoint is ML-Agents' (its modules, not our `theta`)."""
    return POLICY in state and "theta" not in state


def to_mlagents(theta: Weights, normalize: bool, step: int) -> dict[str, Any]:
    """ML-Agents' checkpoint modules for our weights `theta`, at global step `step`."""
    net = Network.of_weights(theta, normalize)
    last = 2 * net.num_layers
    norm = _normalizer_out(theta) if normalize else {}
    policy: dict[str, torch.Tensor] = {
        "version_number": torch.tensor([MODEL_EXPORT_VERSION]),
        "is_continuous_int_deprecated": torch.tensor([1.0]),
        "continuous_act_size_vector": torch.tensor([float(net.action_size)]),
        "discrete_act_size_vector": torch.zeros(1, 0),
        "act_size_vector_deprecated": torch.tensor([float(net.action_size)]),
        "memory_size_vector": torch.tensor([0.0]),
        **norm,
        **_body_out(theta, "actor", net.num_layers),
        LOG_SIGMA: (_get(theta, "log_std") + math.log(ACTION_SCALE)).reshape(1, -1),
        f"{MU}.weight": _get(theta, f"actor.{last}.weight") * ACTION_SCALE,
        f"{MU}.bias": _get(theta, f"actor.{last}.bias") * ACTION_SCALE,
    }
    critic = {
        **norm,
        **_body_out(theta, "critic", net.num_layers),
        f"{VALUE_HEAD}.weight": _get(theta, f"critic.{last}.weight").clone(),
        f"{VALUE_HEAD}.bias": _get(theta, f"critic.{last}.bias").clone(),
    }
    return {
        POLICY: policy,
        GLOBAL_STEP: {STEP_KEY: torch.tensor([int(step)], dtype=torch.int64)},
        OPTIMIZER: _fresh_adam(4 * net.num_layers + 11),
        CRITIC: critic,
    }


def _get(theta: Weights, key: str) -> torch.Tensor:
    if key not in theta:
        raise InteropError(f"not the state_dict of our actor-critic (no {key})")
    return theta[key].detach().to("cpu", torch.float32)


def _body_out(theta: Weights, net: str, layers: int) -> dict[str, torch.Tensor]:
    return {
        f"{BODY}.{2 * i}.{part}": _get(theta, f"{net}.{2 * i}.{part}").clone()
        for i in range(layers)
        for part in ("weight", "bias")
    }


def _normalizer_out(theta: Weights) -> dict[str, torch.Tensor]:
    """Our (count, mean, var) as ML-Agents' (steps, mean, running_variance): same outputs."""
    steps = max(1, round(float(_get(theta, "normalizer.count"))))
    variance = (_get(theta, "normalizer.var").double() + VAR_EPSILON) * steps
    mean = _get(theta, "normalizer.mean")
    out: dict[str, torch.Tensor] = {}
    for prefix in NORMALIZERS:
        out[f"{prefix}.normalization_steps"] = torch.tensor(steps, dtype=torch.int64)
        out[f"{prefix}.running_mean"] = mean.clone()
        out[f"{prefix}.running_variance"] = variance.float()
    return out


def _fresh_adam(count: int) -> dict[str, Any]:
    """The state_dict of a new Adam over `count` parameters, as ML-Agents' PPO creates it."""
    return state_dict("adam", count, ADAM_LR)


def from_mlagents(
    modules: Mapping[str, Any], source: str
) -> tuple[dict[str, torch.Tensor], Network]:
    """Our state_dict and its network from ML-Agents' checkpoint modules; `source` names them."""
    for name in (POLICY, CRITIC):
        if not isinstance(modules.get(name), Mapping):
            raise InteropError(
                f"{source}: no {name!r} module: not an ML-Agents PPO checkpoint with a separate "
                "critic"
            )
    policy, critic = modules[POLICY], modules[CRITIC]
    _check_supported(policy, source)
    layers = sum(1 for key in policy if key.startswith(BODY) and key.endswith(".weight"))
    normalize = f"{NORMALIZERS[0]}.running_mean" in policy
    _check_keys(policy, _policy_keys(layers, normalize), f"{source}: {POLICY}")
    _check_keys(critic, _critic_keys(layers, normalize), f"{source}: {CRITIC}")
    last = 2 * layers
    theta: dict[str, torch.Tensor] = {
        "log_std": policy[LOG_SIGMA].float().reshape(-1) - math.log(ACTION_SCALE),
        **_normalizer_in(policy, normalize),
    }
    heads = {"actor": (policy, MU, ACTION_SCALE), "critic": (critic, VALUE_HEAD, 1.0)}
    for net, (body, head, scale) in heads.items():
        for i in range(layers):
            for part in ("weight", "bias"):
                theta[f"{net}.{2 * i}.{part}"] = body[f"{BODY}.{2 * i}.{part}"].float().clone()
        for part in ("weight", "bias"):
            theta[f"{net}.{last}.{part}"] = body[f"{head}.{part}"].float() / scale
    network = Network.of_weights(theta, normalize)
    _check_shapes(theta, network, source)
    return theta, network


def _check_supported(policy: Mapping[str, torch.Tensor], source: str) -> None:
    """Refuse what our actor cannot be: discrete actions, memory, no continuous actions."""
    discrete = policy.get("discrete_act_size_vector")
    if discrete is not None and discrete.numel() > 0:
        branches = [int(b) for b in discrete.flatten()]
        raise InteropError(f"{source}: discrete action branches {branches}; ours are continuous")
    memory = policy.get("memory_size_vector")
    if memory is not None and memory.numel() > 0 and float(memory.flatten()[0]) != 0.0:
        raise InteropError(
            f"{source}: a recurrent network (memory_size {int(memory.flatten()[0])}); ours has "
            "no memory"
        )


def _policy_keys(layers: int, normalize: bool) -> list[str]:
    constants = [
        "version_number",
        "is_continuous_int_deprecated",
        "continuous_act_size_vector",
        "discrete_act_size_vector",
        "act_size_vector_deprecated",
        "memory_size_vector",
    ]
    tail = [LOG_SIGMA, f"{MU}.weight", f"{MU}.bias"]
    return [*constants, *_shared_keys(layers, normalize), *tail]


def _critic_keys(layers: int, normalize: bool) -> list[str]:
    return [*_shared_keys(layers, normalize), f"{VALUE_HEAD}.weight", f"{VALUE_HEAD}.bias"]


def _shared_keys(layers: int, normalize: bool) -> list[str]:
    stats = ("normalization_steps", "running_mean", "running_variance")
    norm = [f"{prefix}.{stat}" for prefix in NORMALIZERS for stat in stats] if normalize else []
    body = [f"{BODY}.{2 * i}.{part}" for i in range(layers) for part in ("weight", "bias")]
    return norm + body


def _check_keys(module: Mapping[str, Any], expected: list[str], where: str) -> None:
    missing = [key for key in expected if key not in module]
    extra = [key for key in module if key not in expected]
    if missing or extra:
        what = f"no {missing[0]}" if missing else f"unexpected {extra[0]}"
        raise InteropError(
            f"{where}: {what}: not a network this mapping covers (one vector observation, "
            "continuous actions, an MLP body, no memory)"
        )


def _normalizer_in(policy: Mapping[str, torch.Tensor], normalize: bool) -> dict[str, torch.Tensor]:
    """ML-Agents' normaliser as ours; an identity one (never updated) when it has none."""
    if not normalize:
        size = policy[f"{BODY}.0.weight"].shape[1]
        return {
            "normalizer.mean": torch.zeros(size),
            "normalizer.var": torch.ones(size),
            "normalizer.count": torch.zeros(()),
        }
    prefix = NORMALIZERS[0]
    steps = policy[f"{prefix}.normalization_steps"].double().reshape(())
    variance = policy[f"{prefix}.running_variance"].double() / steps - VAR_EPSILON
    return {
        "normalizer.mean": policy[f"{prefix}.running_mean"].float().clone(),
        "normalizer.var": variance.clamp_min(0.0).float(),
        "normalizer.count": steps.float(),
    }


def _check_shapes(theta: Weights, net: Network, source: str) -> None:
    """Every layer the shape the network's sizes say (a checkpoint may be inconsistent)."""
    width, last = net.hidden_units, 2 * net.num_layers
    expected: dict[str, tuple[int, ...]] = {
        "log_std": (net.action_size,),
        "normalizer.mean": (net.obs_size,),
        "normalizer.var": (net.obs_size,),
    }
    for name, outputs in (("actor", net.action_size), ("critic", 1)):
        for i in range(net.num_layers):
            fan_in = net.obs_size if i == 0 else width
            expected[f"{name}.{2 * i}.weight"] = (width, fan_in)
            expected[f"{name}.{2 * i}.bias"] = (width,)
        expected[f"{name}.{last}.weight"] = (outputs, width)
        expected[f"{name}.{last}.bias"] = (outputs,)
    for key, shape in expected.items():
        if tuple(theta[key].shape) != shape:
            raise InteropError(
                f"{source}: {key} maps to shape {tuple(theta[key].shape)}, expected {shape}"
            )
