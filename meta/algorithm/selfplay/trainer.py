"""The ghost trainer: PPO on the learning team's experience against the ghost's opponents.

A game's member of a stack trains with a `GameSession`: its collector steps both teams (`Game`),
the ghost publishes the member's weights after each update, and the training's statistics gain
the game's (ELO, win rate, the decisive share). Only the learning team's experience fills the
buffer, one row per area; at a team change each row continues with the other team's agent of
its area (docs/self-play.md says what a team change cuts and resets).
"""

from __future__ import annotations

import numpy as np
import torch
from mlagents_envs.base_env import ActionTuple

from envs.interface import AgentEnvironment
from envs.tasks.teams import team_of
from meta.algorithm.ppo.network import FrozenPolicy, PolicyStack
from meta.algorithm.ppo.rollout import Acting, Agents, Collection, Collector, Timers, id_lookup
from meta.algorithm.selfplay.ghost import SUMMARIES, Ghost, SelfPlayState, result_of
from meta.algorithm.selfplay.summaries import DECISIVE_STAT, decisive_share, elo_summaries
from meta.config.ppo import PPOConfig
from meta.observe.tags import ELO, SUCCESS, WIN_RATE

GHOST_SEED = 0x6057


class GameSession:
    """One member's training in a game: its team collector and its ghost."""

    def __init__(
        self,
        env: AgentEnvironment,
        member: PolicyStack,
        cfg: PPOConfig,
        state: SelfPlayState | None,
        seed: int,
        generator: torch.Generator,
        timers: Timers,
    ) -> None:
        if cfg.buffer_assembly == "pieces":
            raise ValueError("ppo.buffer_assembly=pieces: games of teams collect whole buffers")
        self.env, self.member, self.cfg = env, member, cfg
        self_play = cfg.self_play
        assert self_play is not None
        if state is not None and "ghost" in state:  # the ghost a training continues
            self.ghost = Ghost.from_state_dict(self_play, state["ghost"])
        else:
            elo = self_play.initial_elo if state is None else float(state["elo"])
            seed_seq = int(np.random.SeedSequence([seed, GHOST_SEED]).generate_state(1)[0])
            self.ghost = Ghost.start(self_play, member.weights(), elo, seed_seq, first_team(env))
        self.game = Game(env, member, self.ghost, generator)
        self.collector = Collector(env, self.game, member, generator, cfg.time_horizon, timers, 1)

    def updated(self) -> None:
        """The member's new weights are the ghost's latest."""
        self.ghost.publish(self.member.weights())

    def finish(self, stats: dict[str, float], steps: int) -> SelfPlayState:
        """The game's statistics added to `stats`; the self-play state to continue from."""
        channel = getattr(self.env, "stats_channel", None)
        if channel is not None:
            channel.get_and_reset_stats()  # games are counted from the learning team's view
        # the learning policy's ELO, its team's win rate and the decisive share of its games
        games = self.game.results
        wins = float(np.mean(np.equal(games, 1.0))) if games else float("nan")
        stats[SUCCESS] = wins
        stats[ELO], stats[WIN_RATE] = self.ghost.current_elo, wins
        stats[DECISIVE_STAT], stats["games"] = decisive_share(games), float(len(games))
        state: SelfPlayState = {"elo": self.ghost.current_elo, "ghost": self.ghost.state_dict()}
        state[SUMMARIES] = elo_summaries(self.game.ratings, self.cfg.summary_freq, steps)
        return state


def team_behaviors(env: AgentEnvironment) -> list[str]:
    """The env's behavior names ordered by team id (`Brain?team=0`, `Brain?team=1`)."""
    teams = {team_of(name): name for name in env.behavior_specs}
    if None in teams or sorted(teams) != [0, 1]:  # type: ignore[type-var]
        raise ValueError(
            f"self-play needs two teams with ids 0 and 1, got behaviors {list(env.behavior_specs)}"
        )
    return [teams[0], teams[1]]


def first_team(env: AgentEnvironment) -> int:
    """The team of the first behavior the env registers: ML-Agents' first learning team."""
    team = team_of(next(iter(env.behavior_specs)))
    return 0 if team is None else team


class Game(Agents):
    """A game's environment as a member's: the learning team's agents are the member's, the
    ghost's opponent plays the other team's (one batched forward pass per team and step)."""

    def __init__(
        self,
        env: AgentEnvironment,
        policy: Acting,
        ghost: Ghost,
        generator: torch.Generator,
    ) -> None:
        self.member, self.env, self.ghost, self.generator = 0, env, ghost, generator
        self.policy, self.device = policy, policy.device
        self.behaviors = team_behaviors(env)
        self.action_size = env.behavior_specs[self.behaviors[0]].action_spec.continuous_size
        self.opponent = self._load_opponent()
        env.reset()
        steps = [env.get_steps(name)[0] for name in self.behaviors]
        self.agent_ids = [s.agent_id.copy() for s in steps]
        if len({len(ids) for ids in self.agent_ids}) != 1 or not len(self.agent_ids[0]):
            raise ValueError("both teams must have the same number of agents, at least one")
        self.indexes = [id_lookup(ids) for ids in self.agent_ids]
        self.obs = np.stack([s.obs[0] for s in steps])
        """Both teams' current observations, (2, n, obs)."""
        self.first = self.obs[ghost.learning_team]
        self.results: list[float] = []
        """The learning team's episode results so far (1 win, 0.5 draw or time-out, 0 loss)."""
        self.agent_steps = 0
        """The learning team's agent-steps so far."""
        self.ratings: list[tuple[int, float]] = []
        """(agent_steps, the learning policy's rating after the game) of every rated game."""

    def _load_opponent(self) -> FrozenPolicy:
        weights = {key: value.to(self.device) for key, value in self.ghost.opponent.items()}
        return FrozenPolicy(weights, self.policy.normalize, self.policy.epsilon)

    def step(self, c: Collection, clipped: np.ndarray, t: int) -> None:
        """The opponent's actions beside the learning team's, one step (the learning team's
        rewards, ends and cuts, its games' results), the ghost's counters; after a team change,
        the environment reset."""
        learner, n = self.ghost.learning_team, len(self.first)
        moves = np.empty((2, n, self.action_size), np.float32)
        moves[learner] = clipped[0]
        other = torch.from_numpy(self.obs[1 - learner]).to(self.device)
        opponent_action = self.opponent.act(other, self.generator)[0]
        np.clip(opponent_action.cpu().numpy(), -1.0, 1.0, out=moves[1 - learner])
        for team, name in enumerate(self.behaviors):
            self.env.set_actions(name, ActionTuple(continuous=moves[team]))
        self.env.step()
        steps = [self.env.get_steps(name) for name in self.behaviors]
        self._same_agents([decision for decision, _ in steps], "between steps")
        decision, terminal = steps[learner]
        c.record(0, t, decision, terminal, self.indexes[learner])
        results = [result_of(r) for r in terminal.reward.tolist()]
        self.results.extend(results)
        # ML-Agents rates only games that ended: a time-out (interrupted) moves no rating.
        cuts = terminal.interrupted
        rated = self.ghost.record_games(r for r, cut in zip(results, cuts, strict=True) if not cut)
        self.ratings.extend((self.agent_steps + n, elo) for elo in rated)
        self.agent_steps += n
        self.obs = np.stack([d.obs[0] for d, _ in steps])
        team_changed, swapped = self.ghost.advance(n, n)
        if swapped:
            self.opponent = self._load_opponent()
        if team_changed:
            rows = np.flatnonzero(~c.ended[0, t])
            c.cuts.append((t, np.zeros(len(rows), np.int64), rows, self.obs[learner][rows]))
            c.restarted[0] = True
            self.env.reset()
            decisions = [self.env.get_steps(name)[0] for name in self.behaviors]
            self._same_agents(decisions, "on reset")
            self.obs = np.stack([d.obs[0] for d in decisions])
        c.obs[0] = self.obs[self.ghost.learning_team]

    def _same_agents(self, decisions: list, when: str) -> None:
        """RuntimeError unless each team's deciding agents are those it had."""
        for team, decision in enumerate(decisions):
            if not np.array_equal(decision.agent_id, self.agent_ids[team]):
                raise RuntimeError(f"agents changed {when}: every agent must decide every step")
