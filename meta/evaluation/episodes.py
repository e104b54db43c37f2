"""Episodes of a policy on a task: the mean return and success of every area's first episodes."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.constants import BEHAVIOR_NAME
from envs.interface import AgentEnvironment
from meta.algorithm.ppo.policy import Policy

Act = Callable[[np.ndarray], np.ndarray]


def policy_actor(policy: Policy, deterministic: bool, generator: torch.Generator) -> Act:
    """`policy` as a function from a batch of observations to actions."""
    device = next(policy.parameters()).device

    @torch.inference_mode()
    def act(obs: np.ndarray) -> np.ndarray:
        action = policy.act(torch.from_numpy(obs).to(device), generator, deterministic)[0]
        return action.cpu().numpy()

    return act


def run_episodes(env: AgentEnvironment, act: Act, episodes: int) -> tuple[float, float, int]:
    """Mean return and success over the first ceil(episodes/areas) episodes of every area.

    Counting whole first episodes per area keeps short (successful) episodes from being
    over-represented. Success is an episode the task ended before max_step (not interrupted),
    the only way the tasks end one early.
    """
    env.reset()
    decision, _ = env.get_steps(BEHAVIOR_NAME)
    ids = decision.agent_id.copy()
    order = np.argsort(ids)
    per_area = math.ceil(episodes / len(ids))
    running = np.zeros(len(ids), np.float64)
    done = np.zeros(len(ids), np.int64)
    returns: list[np.ndarray] = []
    successes: list[np.ndarray] = []
    while (done < per_area).any():
        action = np.clip(act(decision.obs[0]), -1, 1).astype(np.float32, copy=False)
        env.set_actions(BEHAVIOR_NAME, ActionTuple(continuous=action))
        env.step()
        decision, terminal = env.get_steps(BEHAVIOR_NAME)
        reward = np.asarray(decision.reward, np.float64).copy()
        if len(terminal) > 0:
            idx = order[np.searchsorted(ids[order], terminal.agent_id)]
            reward[idx] = terminal.reward
            running += reward
            counted = done[idx] < per_area
            returns.append(running[idx[counted]])
            successes.append(~terminal.interrupted[counted])
            running[idx] = 0.0
            done[idx] += 1
        else:
            running += reward
    values = np.concatenate(returns)
    return float(values.mean()), float(np.concatenate(successes).mean()), len(values)
