"""Collection in a game of two teams: the learning team's policy against a frozen opponent.

Both teams' agents act every step, each team in one batched forward pass; only the learning
team's experience fills the buffer (one row per area). When the learning team changes, the
environment is reset, as ML-Agents' trainer controller resets it then: every game starts
again and each row continues with the other team's agent of its area. The old agents'
unfinished trajectories are cut there and bootstrapped from the value of their last
observation, as a cut at the time horizon is (ML-Agents drops them; here they stay in the
buffer); their unfinished episodes are not counted.
"""

from __future__ import annotations

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.interface import AgentEnvironment
from meta.algorithm.ppo.network import Member
from meta.algorithm.ppo.policy import FrozenPolicy, Policy
from meta.algorithm.ppo.rollout import (
    Bootstrap,
    EpisodeLog,
    NullTimers,
    Pieces,
    Rollout,
    Timers,
    id_lookup,
    next_state_values,
)
from meta.algorithm.selfplay.elo import result_of
from meta.algorithm.selfplay.ghost import Ghost
from meta.runtime.threads import torch_threads

"""(step, rows, observations) whose value replaces next_values[step, rows]."""


def team_behaviors(env: AgentEnvironment) -> list[str]:
    """The env's behavior names ordered by team id (`Brain?team=0`, `Brain?team=1`)."""
    from envs.tasks.teams import team_of

    teams = {team_of(name): name for name in env.behavior_specs}
    if None in teams or sorted(teams) != [0, 1]:  # type: ignore[type-var]
        raise ValueError(
            f"self-play needs two teams with ids 0 and 1, got behaviors {list(env.behavior_specs)}"
        )
    return [teams[0], teams[1]]


def first_team(env: AgentEnvironment) -> int:
    """The team of the first behavior the env registers: ML-Agents' first learning team."""
    from envs.tasks.teams import team_of

    team = team_of(next(iter(env.behavior_specs)))
    return 0 if team is None else team


class TeamCollector:
    """Steps both teams of a game; the ghost decides who learns and whom they play."""

    def __init__(
        self,
        env: AgentEnvironment,
        policy: Member | Policy,
        ghost: Ghost,
        generator: torch.Generator,
        time_horizon: int,
        timers: Timers | None = None,
    ) -> None:
        self.env, self.policy, self.ghost = env, policy, ghost
        self.generator, self.time_horizon = generator, time_horizon
        self.timers: Timers = timers or NullTimers()
        self.device = policy.device
        self.behaviors = team_behaviors(env)
        self.opponent = self._load_opponent()
        env.reset()
        steps = [env.get_steps(name)[0] for name in self.behaviors]
        self.agent_ids = [s.agent_id.copy() for s in steps]
        if len({len(ids) for ids in self.agent_ids}) != 1 or not len(self.agent_ids[0]):
            raise ValueError("both teams must have the same number of agents, at least one")
        self._index = [id_lookup(ids) for ids in self.agent_ids]
        self.obs = np.stack([s.obs[0] for s in steps])
        n = self.num_agents
        self.episode_return = np.zeros((2, n), np.float64)
        self.episode_length = np.zeros(n, np.int64)
        self.trajectory_length = np.zeros(n, np.int64)
        self.episodes = EpisodeLog()
        self.results: list[float] = []
        """The learning team's episode results so far (1 win, 0.5 draw or time-out, 0 loss)."""
        self.agent_steps = 0
        """The learning team's agent-steps so far."""
        self.ratings: list[tuple[int, float]] = []
        """(agent_steps, the learning policy's rating after the game) of every rated game."""

    @property
    def num_agents(self) -> int:
        """Agents per team (one row of the buffer each)."""
        return len(self.agent_ids[0])

    def _load_opponent(self) -> FrozenPolicy:
        weights = {key: value.to(self.device) for key, value in self.ghost.opponent.items()}
        return FrozenPolicy(weights, self.policy.normalize, self.policy.epsilon)

    def collect(self, steps: int) -> Rollout:
        """Run `steps` environment steps and return the learning team's buffer."""
        with torch_threads(1):
            return self._collect(steps)

    def _collect(self, steps: int) -> Rollout:
        n, obs_size = self.obs.shape[1:]
        obs_np = np.empty((steps, n, obs_size), np.float32)
        obs = torch.from_numpy(obs_np)
        actions = torch.empty((steps, n, 2))
        log_probs, values = torch.empty((steps, n)), torch.empty((steps + 1, n))
        rewards = np.zeros((steps, n), np.float32)
        boundaries = np.zeros((steps, n), np.float32)
        ended = np.zeros((steps, n), bool)
        bootstraps: Pieces = []
        moves = np.empty((2, n, 2), np.float32)
        acting = self.policy.frozen()
        for t in range(steps):
            learner = self.ghost.learning_team
            obs_np[t] = self.obs[learner]
            with self.timers.scope("policy_forward"):
                action, log_prob, value = acting.act(obs[t].to(self.device), self.generator)
                other = torch.from_numpy(self.obs[1 - learner]).to(self.device)
                opponent_action = self.opponent.act(other, self.generator)[0]
            actions[t].copy_(action)
            log_probs[t].copy_(log_prob)
            values[t].copy_(value)
            np.clip(action.cpu().numpy(), -1.0, 1.0, out=moves[learner])
            np.clip(opponent_action.cpu().numpy(), -1.0, 1.0, out=moves[1 - learner])
            with self.timers.scope("env_step"):
                for team, name in enumerate(self.behaviors):
                    self.env.set_actions(name, ActionTuple(continuous=moves[team]))
                self.env.step()
                steps_now = [self.env.get_steps(name) for name in self.behaviors]
            self._record(t, learner, steps_now, rewards, ended, bootstraps)
            team_changed, swapped = self.ghost.advance(n, n)
            if swapped:
                self.opponent = self._load_opponent()
            cut = ended[t] | (self.trajectory_length >= self.time_horizon)
            if team_changed:
                rows = np.flatnonzero(~ended[t])
                bootstraps.append((t, rows, self.obs[learner][rows]))
                cut[:] = True
                self._restart()
            boundaries[t] = cut
            self.trajectory_length[cut] = 0
        last = torch.from_numpy(self.obs[self.ghost.learning_team].copy())
        values[steps].copy_(acting.value(last.to(self.device)))
        next_values = next_state_values(acting.value, values, ended, bootstraps, self.device)
        return Rollout(
            obs,
            actions,
            log_probs,
            values[:-1],
            torch.from_numpy(rewards),
            next_values,
            torch.from_numpy(boundaries),
            Bootstrap(last, ended, bootstraps),
        )

    def _restart(self) -> None:
        """Reset the environment after a team change: new games, unfinished ones not counted."""
        with self.timers.scope("env_step"):
            self.env.reset()
            steps = [self.env.get_steps(name)[0] for name in self.behaviors]
        for team, decision in enumerate(steps):
            if not np.array_equal(decision.agent_id, self.agent_ids[team]):
                raise RuntimeError("agents changed on reset: every agent must decide every step")
        self.obs = np.stack([d.obs[0] for d in steps])
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0

    def _record(
        self,
        t: int,
        learner: int,
        steps_now: list,
        rewards: np.ndarray,
        ended: np.ndarray,
        bootstraps: Pieces,
    ) -> None:
        """One step's rewards, ends, episode returns and game results, both teams at once."""
        for team, (decision, _) in enumerate(steps_now):
            if not np.array_equal(decision.agent_id, self.agent_ids[team]):
                raise RuntimeError(
                    "agents changed between steps: every agent must decide every step"
                )
        step_reward = np.stack([d.reward for d, _ in steps_now])
        done = np.zeros(self.num_agents, bool)
        terminal = steps_now[learner][1]
        if len(terminal):
            for team, (_, term) in enumerate(steps_now):
                step_reward[team, self._index[team](term.agent_id)] = term.reward
            rows = self._index[learner](terminal.agent_id)
            done[rows] = True
            timed_out = terminal.interrupted
            if timed_out.any():
                bootstraps.append((t, rows[timed_out], terminal.obs[0][timed_out]))
            results = [result_of(r) for r in terminal.reward.tolist()]
            self.results.extend(results)
            # ML-Agents rates only games that ended: a time-out (interrupted) moves no rating.
            rated = self.ghost.record_games(
                r for r, cut in zip(results, timed_out, strict=True) if not cut
            )
            self.ratings.extend((self.agent_steps + self.num_agents, elo) for elo in rated)
        rewards[t] = step_reward[learner]
        ended[t] = done
        self.episode_return += step_reward
        self.episode_length += 1
        self.trajectory_length += 1
        self.agent_steps += self.num_agents
        if done.any():
            self.episodes.returns.extend(self.episode_return[learner, done].tolist())
            self.episodes.lengths.extend(self.episode_length[done].tolist())
            self.episode_return[:, done] = 0.0
            self.episode_length[done] = 0
        self.obs = np.stack([d.obs[0] for d, _ in steps_now])
