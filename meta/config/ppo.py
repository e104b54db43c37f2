"""Settings of the inner PPO, its network and self-play, with ML-Agents' names and defaults.

As ML-Agents' trainer settings hold `self_play` beside the hyperparameters, so does PPOConfig:
the ghost trainer builds on PPO and reads them here (`meta.algorithm.selfplay` is above it).
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("constant", "linear")
OPTIMIZERS = ("adam", "sgd")
INITIALIZATIONS = ("orthogonal", "mlagents")
RATIOS = ("joint", "per_dimension")
ENTROPIES = ("sum", "mean")
ADVANTAGE_NORMALIZATIONS = ("minibatch", "buffer")
SCHEDULE_TIMINGS = ("before_buffer", "after_buffer")
BUFFER_ASSEMBLIES = ("steps", "pieces")
POLICY_LOSS_STATS = ("signed", "absolute")
POSITIVE = (
    *("batch_size", "buffer_size", "num_epoch", "time_horizon", "max_steps", "summary_freq"),
    *("learning_rate", "max_grad_norm", "adam_epsilon", "action_scale"),
)
"""PPO's settings that must be > 0, in the order they are checked."""


def positive(name: str, value: float) -> None:
    """Raise ValueError unless `value` > 0, naming the setting."""
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


@dataclass
class SelfPlayConfig:
    """ML-Agents' `self_play` section: snapshots, opponent swaps, team changes, ELO."""

    save_steps: int = 20000
    """Learning-team agent-steps between snapshots of the learning policy."""
    team_change: int = 100000
    """Learning-team agent-steps before the other team becomes the learning team."""
    swap_steps: int = 2000
    """Opponent agent-steps between draws of a new opponent."""
    window: int = 10
    """Past snapshots an opponent is drawn from."""
    play_against_latest_model_ratio: float = 0.5
    """Probability that the opponent is the latest policy rather than a past snapshot."""
    initial_elo: float = 1200.0
    """ELO rating of the policy at the start of the run."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid setting."""
        for name in ("save_steps", "team_change", "swap_steps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ppo.self_play.{name} must be > 0, got {getattr(self, name)}")
        if self.window < 1:
            raise ValueError(f"ppo.self_play.window must be >= 1, got {self.window}")
        ratio = self.play_against_latest_model_ratio
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(
                f"ppo.self_play.play_against_latest_model_ratio must be in [0, 1], got {ratio}"
            )
        if not -1e6 < self.initial_elo < 1e6:
            raise ValueError(f"ppo.self_play.initial_elo must be finite, got {self.initial_elo}")


@dataclass
class NetworkConfig:
    """Actor-critic MLP, as ML-Agents' `network_settings`."""

    hidden_units: int = 128
    """Units per hidden layer."""
    num_layers: int = 2
    """Hidden layers in the actor and in the critic."""
    normalize: bool = True
    """Running observation normaliser (its statistics are part of the weights)."""
    normalizer_epsilon: float = 1.0e-8
    """Added to the observations' variance before its square root (ML-Agents: 0)."""
    initial_log_std: float = 0.0
    """Log sigma of a fresh policy, in the environment's action units (ML-Agents': -ln 3)."""
    initialization: str = "orthogonal"
    """Fresh weights: `orthogonal` (gain sqrt 2, mean 0.01, value 1) or `mlagents` (1.1.0's)."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if self.initialization not in INITIALIZATIONS:
            raise ValueError(
                f"network.initialization: unknown value {self.initialization!r} "
                f"(use one of {INITIALIZATIONS})"
            )
        positive("network.hidden_units", self.hidden_units)
        positive("network.num_layers", self.num_layers)
        if not 0.0 <= self.normalizer_epsilon <= 1.0:
            raise ValueError(
                f"network.normalizer_epsilon must be in [0, 1], got {self.normalizer_epsilon}"
            )
        if not -20.0 <= self.initial_log_std <= 2.0:
            raise ValueError(
                f"network.initial_log_std must be in [-20, 2], got {self.initial_log_std}"
            )


@dataclass
class PPOConfig:
    """Inner PPO hyperparameters, ML-Agents' names and defaults."""

    batch_size: int = 1024
    """Minibatch size of a gradient step, in agent-steps."""
    buffer_size: int = 10240
    """Agent-steps collected before each update."""
    learning_rate: float = 3.0e-4
    """Step size of the optimizer at the start of the training."""
    beta: float = 5.0e-3
    """Entropy regularisation coefficient."""
    epsilon: float = 0.2
    """Clip range of the policy ratio and of the value change."""
    lambd: float = 0.95
    """GAE lambda."""
    gamma: float = 0.99
    """Discount factor."""
    num_epoch: int = 3
    """Passes over the buffer per update."""
    time_horizon: int = 64
    """Trajectories are cut (and bootstrapped with the value estimate) every this many steps."""
    max_steps: int = 20480
    """Agent-steps of one inner training (per task)."""
    learning_rate_schedule: str = "linear"
    """`constant` or `linear` (polynomial decay to 1e-10 over max_steps)."""
    beta_schedule: str = "linear"
    """`constant` or `linear` (decay to 1e-5 over max_steps)."""
    epsilon_schedule: str = "linear"
    """`constant` or `linear` (decay to 0.1 over max_steps)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    value_coef: float = 0.5
    """Weight of the value loss in the total loss."""
    optimizer: str = "adam"
    """`adam` (ML-Agents' optimizer) or `sgd` (plain gradient steps, as MAML's inner loop
    takes them); the inner trainings, the baselines and meta-eval's adaptation all use it."""
    ratio: str = "joint"
    """`joint` (one ratio of the policy's probabilities per sample, clipped) or `per_dimension`
    (ML-Agents: one ratio per action dimension, each clipped, the surrogate averaged over all)."""
    entropy: str = "sum"
    """`sum` (the policy's entropy, summed over action dimensions) or `mean` (ML-Agents' mean)."""
    advantage_normalization: str = "minibatch"
    """`minibatch` (each minibatch, sample std, eps 1e-8) or `buffer` (ML-Agents: once per buffer
    before the epochs, population std, eps 1e-10)."""
    adam_epsilon: float = 1.0e-7
    """Adam's epsilon (ML-Agents keeps torch's default, 1e-8)."""
    schedule_timing: str = "before_buffer"
    """When an update reads its scheduled values: `before_buffer` (at the steps done before its
    buffer is collected) or `after_buffer` (ML-Agents: after the buffer's steps are counted)."""
    buffer_assembly: str = "steps"
    """`steps` (each buffer `ceil(buffer_size / agents)` steps of every agent) or `pieces`
    (ML-Agents: an update once the trajectory pieces completed since the last one, each cut at
    `time_horizon` or an episode's end, hold more than `buffer_size` steps; what an agent has
    begun carries over to the next buffer)."""
    normalizer_prior: int = 0
    """Observations at mean 0 and variance 1 a fresh normaliser starts from (ML-Agents: 1)."""
    action_scale: float = 1.0
    """s: the actor's mean layer steps as if stored times s, as ML-Agents' does with its actions
    `clip(a, -s, s) / s` (3); our checkpoints stay in the environment's units."""
    policy_loss_stat: str = "signed"
    """Policy Loss as minimised (`signed`) or its absolute value (`absolute`: ML-Agents)."""
    summary_freq: int = 50000
    """Agent-steps between the summaries of a game's ELO (ML-Agents' summary_freq)."""
    self_play: SelfPlayConfig | None = None
    """ML-Agents' `self_play` section: games of teams train with the ghost trainer (None: off)."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field, before any environment step."""
        for name in POSITIVE:
            positive(f"ppo.{name}", getattr(self, name))
        if self.max_steps < self.buffer_size:
            raise ValueError(
                f"ppo.max_steps ({self.max_steps}) is below ppo.buffer_size ({self.buffer_size}): "
                "an inner training collects whole buffers; raise max_steps or lower buffer_size"
            )
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"ppo.batch_size ({self.batch_size}) exceeds ppo.buffer_size ({self.buffer_size})"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"ppo.optimizer: unknown optimizer {self.optimizer!r} (use one of {OPTIMIZERS})"
            )
        for name in ("beta", "epsilon", "value_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"ppo.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("lambd", "gamma"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"ppo.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.normalizer_prior < 0:
            raise ValueError(f"ppo.normalizer_prior must be >= 0, got {self.normalizer_prior}")
        for name, choices in (
            ("ratio", RATIOS),
            ("entropy", ENTROPIES),
            ("advantage_normalization", ADVANTAGE_NORMALIZATIONS),
            ("schedule_timing", SCHEDULE_TIMINGS),
            ("buffer_assembly", BUFFER_ASSEMBLIES),
            ("policy_loss_stat", POLICY_LOSS_STATS),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"ppo.{name}: unknown value {getattr(self, name)!r} (use one of {choices})"
                )
        if self.self_play is not None:
            self.self_play.validate()
        for name in ("learning_rate_schedule", "beta_schedule", "epsilon_schedule"):
            if getattr(self, name) not in SCHEDULES:
                raise ValueError(
                    f"ppo.{name}: unknown schedule {getattr(self, name)!r} (use one of {SCHEDULES})"
                )


def check_normalizer(network: NetworkConfig, ppo: PPOConfig) -> None:
    """Raise ValueError when the normaliser could divide by a zero variance."""
    if network.normalize and network.normalizer_epsilon == 0.0 and ppo.normalizer_prior < 1:
        raise ValueError(
            "network.normalizer_epsilon=0 needs ppo.normalizer_prior >= 1 (ML-Agents' "
            "prior keeps the variance above 0); a constant observation would give NaN"
        )
