"""SHA-256 of θ after a short meta-train run: do two versions of the code compute the same θ?

``python -m meta.bench.digest [key=value ...]`` runs meta-train in-process (seed 0, 2 meta-steps
of 2 inner trainings of 20,480 agent-steps unless overridden, e.g. ``ppo.fast=true``) in a
temporary directory and prints the digest of θ's tensors (names, dtypes, shapes and bytes)
and of the final ``Brain.pt`` file. Equal digests from two checkouts mean bit-identical
weights; it reads only what every version of meta-train writes.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile

import torch
from omegaconf import OmegaConf

from meta.config import Config
from meta.trainer import train as meta_train

DEFAULTS = [
    "run_id=digest",
    "meta.steps=2",
    "meta.meta_batch_size=2",
    "ppo.max_steps=20480",
    "logger.console=false",
    "logger.tensorboard=false",
]


def tensor_digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a state_dict's names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> None:
    """Print the digests of θ and of Brain.pt for the given overrides."""
    overrides = DEFAULTS + list(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as folder:
        given = OmegaConf.from_dotlist([*overrides, f"results_dir={folder}"])
        merged = OmegaConf.merge(OmegaConf.structured(Config), given)
        cfg = OmegaConf.to_object(merged)
        assert isinstance(cfg, Config)
        run_dir = meta_train(cfg, cfg.run_id)
        theta = torch.load(run_dir / "Brain" / "checkpoint.pt", weights_only=True)["theta"]
        final = hashlib.sha256((run_dir / "Brain.pt").read_bytes()).hexdigest()
    print(f"overrides: {' '.join(overrides[1:])}")
    print(f"theta    {tensor_digest(theta)}")
    print(f"Brain.pt {final}")


if __name__ == "__main__":
    main()
