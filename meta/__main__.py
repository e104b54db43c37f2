"""`python -m meta [overrides]`: meta-train."""

from meta.cli import train_main

train_main()
