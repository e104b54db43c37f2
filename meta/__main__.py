"""`python -m meta [overrides]`: meta-train."""

from meta.launch import train

train()
