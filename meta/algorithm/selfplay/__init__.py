"""Self-play for games of teams: ML-Agents' ghost trainer, snapshots and ELO."""
