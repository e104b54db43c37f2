"""Process utilities: atomic writes, locks, signals and interrupts, torch threads, fault points."""
