"""The run directory: status store, checkpoints, configuration, meta-step records, exports."""
