"""Our inner PPO and Stable-Baselines3's PPO on the same batched task, timed and evaluated alike.

Stable-Baselines3 and gymnasium (the `[bench]` extra) are imported by the functions that use
them, so the settings and our side import with the core dependencies alone.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

import envs
from meta.algorithm.ppo.hyper import EPSILON_FLOOR, LEARNING_RATE_FLOOR, decayed
from meta.algorithm.ppo.network import policy_for
from meta.algorithm.request import TrainRequest
from meta.algorithm.training import train
from meta.config.ppo import NetworkConfig, PPOConfig
from meta.evaluation.episodes import Act, policy_actor, run_episodes

if TYPE_CHECKING:
    from stable_baselines3 import PPO


BENCH_EXTRA = {"gymnasium": "gymnasium", "stable_baselines3": "stable-baselines3"}
"""Modules of the `[bench]` extra, with their package names (gymnasium first: SB3 needs it)."""


def missing_extra() -> str | None:
    """The first package of the `[bench]` extra that is not installed, or None."""
    for module in BENCH_EXTRA:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name not in BENCH_EXTRA:
                raise  # installed, but broken: the traceback says more than a line could
            return BENCH_EXTRA[error.name]
    return None


@dataclass(frozen=True)
class Settings:
    """What both trainings share."""

    task: str = "FindTarget"
    """Built-in task family, default parameters."""
    num_areas: int = 64
    """Parallel areas (SB3: n_envs)."""
    budget: int = 300_000
    """Agent-steps of each training (both round up to whole buffers)."""
    seed: int = 0
    """Seed of the weights, the sampling and the training environment."""
    eval_episodes: int = 1024
    """Fresh episodes (one per area of a separate environment) scoring the final policy."""
    eval_seed: int = 12345
    """Seed of the evaluation environment, the same for both."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """ML-Agents defaults: buffer 10240, batch 1024, 3 epochs, lr 3e-4, epsilon 0.2, ..."""
    network: NetworkConfig = field(default_factory=NetworkConfig)
    """2 x 128 SiLU, separate actor and critic, observation normaliser."""

    @property
    def n_steps(self) -> int:
        """Rollout length per area: buffer_size / num_areas."""
        return max(self.ppo.buffer_size // self.num_areas, 1)


@dataclass
class Outcome:
    """One timed training and its evaluation."""

    agent_steps: int
    seconds: float
    cpu_seconds: float
    success: float

    @property
    def rate(self) -> float:
        """Agent-steps per second of wall time."""
        return self.agent_steps / self.seconds


def success_rate(act: Act, settings: Settings) -> float:
    """Fraction of fresh first episodes (one per area) that `act` ends by success."""
    env = envs.make(settings.task, num_areas=settings.eval_episodes, seed=settings.eval_seed)
    try:
        return run_episodes(env, act, settings.eval_episodes)[1]
    finally:
        env.close()


def train_ours(settings: Settings) -> Outcome:
    """Our inner PPO from a fresh policy; timed from the first step to the last update."""
    env = envs.make(settings.task, num_areas=settings.num_areas, seed=settings.seed)
    cfg = replace(settings.ppo, max_steps=settings.budget)
    request = TrainRequest((), None, settings.seed, cfg, settings.network)
    start, cpu = time.perf_counter(), time.process_time()
    result = train(request, env)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    env.close()
    policy = policy_for(env, settings.network)
    policy.load_state_dict(result.weights)
    act = policy_actor(policy, True, torch.Generator())
    return Outcome(int(result.stats["steps"]), seconds, cpu_seconds, success_rate(act, settings))


class _Schedule:
    """An ML-Agents linear schedule as SB3's function of progress_remaining.

    SB3 reads its schedules after collecting a buffer, ours before: shifting by one buffer
    gives both the same value at every update.
    """

    def __init__(self, initial: float, floor: float, budget: int, buffer: int) -> None:
        self.initial, self.floor, self.budget, self.buffer = initial, floor, budget, buffer

    def __call__(self, progress_remaining: float) -> float:
        steps = max(round((1.0 - progress_remaining) * self.budget) - self.buffer, 0)
        return decayed("linear", self.initial, self.floor, steps, self.budget)


def sb3_model(settings: Settings) -> PPO:
    """SB3 PPO with our settings over a TaskVecEnv, observations normalised by VecNormalize."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecNormalize

    from meta.bench.gym_vec import TaskVecEnv

    cfg, net = settings.ppo, settings.network
    buffer = settings.n_steps * settings.num_areas
    venv = TaskVecEnv(settings.task, num_areas=settings.num_areas, seed=settings.seed)
    env = VecNormalize(venv, norm_obs=net.normalize, norm_reward=False, clip_obs=5.0)
    epsilon = _Schedule(cfg.epsilon, EPSILON_FLOOR, settings.budget, buffer)
    layers = [net.hidden_units] * net.num_layers
    model = PPO(
        "MlpPolicy",
        env,
        learning_rate=_Schedule(cfg.learning_rate, LEARNING_RATE_FLOOR, settings.budget, buffer),
        n_steps=settings.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.num_epoch,
        gamma=cfg.gamma,
        gae_lambda=cfg.lambd,
        clip_range=epsilon,
        clip_range_vf=epsilon,
        ent_coef=cfg.beta,
        vf_coef=cfg.value_coef,
        max_grad_norm=cfg.max_grad_norm,
        policy_kwargs={
            "net_arch": {"pi": layers, "vf": layers},
            "activation_fn": nn.SiLU,
            "optimizer_kwargs": {"eps": 1e-7},
        },
        seed=settings.seed,
        device="cpu",
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # learn() would make a temp folder
    return model


def train_sb3(settings: Settings) -> Outcome:
    """SB3's PPO.learn for the budget; timed around learn() alone."""
    from stable_baselines3.common.vec_env import VecNormalize

    model = sb3_model(settings)
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=settings.budget)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    env = model.get_env()
    assert isinstance(env, VecNormalize)

    def act(obs: np.ndarray) -> np.ndarray:
        normalized = env.normalize_obs(obs)
        assert isinstance(normalized, np.ndarray)
        return model.predict(normalized, deterministic=True)[0]

    outcome = Outcome(model.num_timesteps, seconds, cpu_seconds, success_rate(act, settings))
    env.close()
    return outcome
