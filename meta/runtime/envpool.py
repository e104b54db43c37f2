"""Environments for inner trainings: native tasks in-process, or builds over the protocol."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import IO, Any

from envs.interface import TaskEnvironment
from meta.config import EnvConfig
from meta.runtime.slots import claim

BUILD_STACK = 8
"""Trainings in one stack at most on builds (env.backend=unity): each member steps builds of
its own, each build a process of the machine with ports of its own."""


class EnvPool:
    """Hands out an environment per task; builds stay alive across meta-steps."""

    def __init__(self, cfg: EnvConfig, slot: int = 0, claim: IO[str] | None = None) -> None:
        """`claim`: the lock file that holds `slot` for this pool, released when it closes."""
        self.cfg = cfg
        self.slot = slot
        """Which block of worker ids (ports) this pool's builds take: one per Ray actor."""
        self.log_folder: str | None = None
        """Where builds write their -logFile (the run's run_logs once the run exists)."""
        self._builds: dict[tuple[str, int], Any] = {}
        self._claim = claim
        self._member = 0

    @classmethod
    def claiming(cls, cfg: EnvConfig) -> EnvPool:
        """A pool on builds whose slot no other process on the machine holds (slot 0 stays
        meta-train's); a pool of native tasks needs none."""
        if cfg.backend == "native":
            return cls(cfg)
        return cls(cfg, *claim(cfg.base_port))

    def for_member(self, member: int) -> EnvPool:
        """This pool as stack member `member` uses it: the same builds, its own by default."""
        view = copy.copy(self)
        view._member = member
        return view

    @property
    def span(self) -> int:
        """Worker ids (ports) one pool's builds take: num_envs per family and stack member."""
        return len(self.cfg.path) * self.cfg.num_envs * BUILD_STACK

    def check(self, families: Sequence[str]) -> None:
        """Fail before training when a needed build does not exist or cannot run."""
        if self.cfg.backend == "unity":
            from envs.backend.unity_env import resolve_build

            for family in families:
                resolve_build(family, self.path(family))

    def path(self, family: str) -> str:
        """The build path configured for a family."""
        if family not in self.cfg.path:
            raise ValueError(f"env.path has no build for task {family!r}")
        return self.cfg.path[family]

    def env(
        self,
        family: str,
        params: dict[str, float],
        seed: int,
        num_areas: int | None = None,
        member: int | None = None,
    ) -> TaskEnvironment:
        """An environment of `family` with `params`, reset at its next use; on builds, stack
        member `member`'s build of the family (each member of a stack steps its own; None:
        the member this pool is for)."""
        areas = num_areas or self.cfg.num_areas
        if self.cfg.backend == "native":
            import envs

            return envs.make(family, num_areas=areas, seed=seed, **params)
        member = self._member if member is None else member
        build = self._builds.get((family, member))
        if build is None:
            from envs.backend.unity_env import UnityEnv

            # each family's workers keep their own ports: base_port + worker_id, each pool (the
            # driver's, every actor's) its own block of worker ids, each member its part of it
            families = sorted(self.cfg.path)
            build = UnityEnv(
                family,
                path=self.path(family),
                num_envs=self.cfg.num_envs,
                num_areas=areas,
                seed=seed,
                base_port=self.cfg.base_port,
                worker_id=self.slot * self.span
                + (member * len(self.cfg.path) + families.index(family)) * self.cfg.num_envs,
                timeout_wait=self.cfg.timeout_wait,
                no_graphics=self.cfg.no_graphics,
                log_folder=self.log_folder,
            )
            self._builds[family, member] = build
        build.set_parameters(**params)
        return build

    def concat(
        self, tasks: Sequence[tuple[str, dict[str, float]]], seed: int, member: int | None = None
    ) -> TaskEnvironment:
        """One environment whose areas are split across several tasks (joint training)."""
        from envs.tasks.concat import ConcatEnv

        share = max(self.cfg.num_areas // len(tasks), 1)
        return ConcatEnv(
            [
                self.env(family, params, seed + i, share, member)
                for i, (family, params) in enumerate(tasks)
            ]
        )

    def release(self, env: TaskEnvironment) -> None:
        """Done with an environment: native ones close, builds stay up for the next task."""
        if self.cfg.backend == "native":
            env.close()

    def crash_types(self) -> tuple[type[BaseException], ...]:
        """Exceptions that mean a build died or could not start (and can be relaunched)."""
        if self.cfg.backend != "unity":
            return ()
        from envs.backend.worker import BuildError

        return (BuildError,)  # a build that fails to launch counts as a crash too

    def restart_all(self) -> None:
        """Drop every build; each is relaunched when next asked for."""
        for build in self._builds.values():
            build.close()
        self._builds.clear()

    def close(self) -> None:
        """Close every build and give up the pool's claimed slot."""
        self.restart_all()
        if self._claim is not None:
            self._claim.close()
            self._claim = None
