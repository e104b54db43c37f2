"""Watching a run: the stats reporter and its writers, the progress bar."""
