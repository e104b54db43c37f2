"""The run directory: status store, checkpoints, atomic writes, meta-step records."""
