"""The algorithm: Reptile's outer step and schedules, and the inner PPO."""
