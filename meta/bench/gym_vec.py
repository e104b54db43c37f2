"""Stable-Baselines3 VecEnv over a built-in task's batched core: one sub-environment per area.

SB3 then steps the same arrays as the native BaseEnv does, with SB3's conventions: ended
sub-environments are already reset, their last observation is in `infos[i]["terminal_observation"]`
and a time-out is flagged `infos[i]["TimeLimit.truncated"]`, so SB3 bootstraps it as PPO should.
SB3's VecEnv is its base class, so this module needs the `[bench]` extra to import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

import envs
from envs.tasks.core import ACTION_SIZE, OBS_SIZE


class TaskVecEnv(VecEnv):
    """A built-in task with `num_areas` areas as a VecEnv of `num_areas` environments."""

    def __init__(self, name: str, *, num_areas: int, seed: int = 0, **params: float) -> None:
        self.task = envs.make(name, num_areas=num_areas, seed=seed, **params)
        self.core = self.task.core
        self.render_mode = None
        self._actions = np.zeros((num_areas, ACTION_SIZE), np.float32)
        observation_space = spaces.Box(-np.inf, np.inf, (OBS_SIZE,), np.float32)
        action_space = spaces.Box(-1.0, 1.0, (ACTION_SIZE,), np.float32)
        super().__init__(num_areas, observation_space, action_space)

    def reset(self) -> np.ndarray:
        """Start new episodes in every area; return the (num_areas, obs) observations."""
        return self.core.reset()

    def step_async(self, actions: np.ndarray) -> None:
        """Keep the actions, clipped to [-1, 1] as float32, for step_wait."""
        np.clip(actions, -1.0, 1.0, out=self._actions)

    def step_wait(self) -> VecEnvStepReturn:
        """Step every area; ended areas report their final observation in infos."""
        obs, reward, ended = self.core.step(self._actions)
        dones = np.zeros(self.num_envs, bool)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if ended is not None:
            idx = ended.agent_id
            reward[idx] = ended.reward
            dones[idx] = True
            for k, i in enumerate(idx.tolist()):
                timed_out = bool(ended.interrupted[k])
                infos[i] = {
                    "terminal_observation": ended.obs[k],
                    "TimeLimit.truncated": timed_out,
                    "is_success": not timed_out,
                }
        return obs, reward, dones, infos

    def close(self) -> None:
        """Release the task."""
        self.task.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute of this (shared) environment, once per index."""
        return [getattr(self, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set the attribute on the shared environment."""
        setattr(self, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **kwargs: Any
    ) -> list[Any]:
        """Call a method of the task (the areas share it) once, reported per index."""
        result = getattr(self.task, method_name)(*method_args, **kwargs)
        return [result] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """No gymnasium wrappers inside."""
        return [False] * len(self._indices(indices))

    def _indices(self, indices: VecEnvIndices) -> Sequence[int]:
        return list(self._get_indices(indices))
