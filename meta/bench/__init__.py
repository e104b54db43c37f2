"""meta-bench: our inner PPO against Stable-Baselines3, the GEMM limit, outer-loop overhead."""
