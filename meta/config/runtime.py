"""Where a run's trainings execute: the runtime's settings and the checks of what can stack."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

from meta.config.ppo import positive
from meta.config.retired import retired

RUNTIMES = ("local", "ray")
MATMUL_PRECISIONS = ("highest", "high", "medium")
"""What `torch.set_float32_matmul_precision` takes (`torch_matmul_precision`)."""


@dataclass
class RuntimeConfig:
    """Where a meta-step's inner trainings and meta-eval's adaptation jobs run."""

    backend: str = "local"
    """`local` (this process) or `ray` (Ray actors, side by side); either trains the jobs that
    share their settings as stacks (meta.runtime.jobs)."""
    workers: int = 1
    """local: worker processes a meta-step's stacks are shared out to, each taking a share of
    every stack (never one member of several alone: the same bits as in this process)."""
    address: str | None = None
    """ray: null starts a local Ray cluster; `auto` joins the running one; or `host:port`."""
    num_actors: int = 2
    """ray: actors, each owning its environments (builds stay alive across meta-steps)."""
    cpus_per_actor: float = 1.0
    """ray: CPUs Ray reserves for each actor."""
    torch_threads: int = 1
    """ray: torch intra-op threads in each actor."""
    num_cpus: int | None = None
    """ray, local cluster only: CPUs it offers (null: all of this machine's)."""
    compile: bool = False
    """Stacks of two or more trainings run their update's losses and backward as torch.compile's
    fused kernels: faster, after a compilation of seconds once per process (cached on disk);
    the same as uncompiled to rounding, bitwise in any stack and on any thread count. Needs a
    C++ compiler (g++, or $CXX)."""

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if message := retired("runtime.backend", self.backend):
            raise ValueError(message)
        if self.backend not in RUNTIMES:
            raise ValueError(f"runtime.backend: unknown {self.backend!r} (use one of {RUNTIMES})")
        positive("runtime.workers", self.workers)
        if self.workers > 1 and self.backend == "ray":
            raise ValueError(
                "runtime.workers is for runtime=local; on Ray, runtime.num_actors says how many"
            )
        if self.num_actors < 1:
            raise ValueError(f"runtime.num_actors must be >= 1, got {self.num_actors}")
        if self.compile:
            check_compiler()
        positive("runtime.cpus_per_actor", self.cpus_per_actor)
        positive("runtime.torch_threads", self.torch_threads)
        if self.num_cpus is not None:
            positive("runtime.num_cpus", self.num_cpus)
            if self.backend == "ray" and self.address is None:
                # the local cluster will offer num_cpus: say so before starting it
                self.check_room(self.num_cpus, " (runtime.num_cpus)")
        if self.address is not None and self.address != "auto" and not _host_port(self.address):
            raise ValueError(
                f"runtime.address: {self.address!r} is not `auto` or host:port (e.g. 10.0.0.1:6379)"
            )

    def check_room(self, cpus: float, source: str = "") -> None:
        """ValueError when `cpus` cannot hold num_actors x cpus_per_actor (`source`: whose)."""
        need = self.num_actors * self.cpus_per_actor
        if need > cpus:
            raise ValueError(
                f"runtime.num_actors={self.num_actors} x runtime.cpus_per_actor="
                f"{self.cpus_per_actor} needs {need:g} CPUs; the Ray cluster has {cpus:g}{source}"
            )


def check_compiler() -> None:
    """ValueError unless the C++ compiler torch.compile's CPU kernels are built with is found."""
    name = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    if shutil.which(name) is None:
        raise ValueError(
            f"runtime.compile=true needs a C++ compiler for torch.compile's kernels and {name!r} "
            "is not on PATH: install it (or set CXX), or drop runtime.compile"
        )


def check_seeds(seeds: list[int]) -> None:
    """ValueError unless `seeds` names distinct seeds."""
    given = "seeds=[" + ",".join(str(s) for s in seeds) + "]"
    if not seeds:
        raise ValueError("seeds=[] names no seed: give them (seeds=[0,1,2]) or leave seeds out")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ValueError(f"{given} names seed {twice[0]} more than once")


def _host_port(address: str) -> bool:
    """Whether `address` reads as host:port (a ray:// client address included)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    return bool(host) and port.isdigit()


def check_matmul_precision(precision: str) -> None:
    """Refuse a `torch_matmul_precision` that torch does not know, in one line."""
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(
            f"torch_matmul_precision={precision}: must be one of {', '.join(MATMUL_PRECISIONS)}"
        )
