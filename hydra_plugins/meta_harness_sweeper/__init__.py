"""Hydra's Optuna sweeper on a stored study that a search's same command continues."""
