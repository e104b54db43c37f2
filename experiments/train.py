"""`python experiments/train.py [overrides]`: the same app as `meta-train`."""

from meta.cli import train_main

if __name__ == "__main__":
    train_main()
