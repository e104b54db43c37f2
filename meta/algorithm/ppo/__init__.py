"""Inner PPO with ML-Agents' semantics: policy, rollout, loss, update and one training."""
