"""The built-in tasks: batched cores, families and their parameters, the BaseEnv adapter."""
