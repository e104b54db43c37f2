"""Watching a run: its console and progress bar, the stats reporter and writers, timers."""
