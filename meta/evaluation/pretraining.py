"""meta-eval's joint pretraining: the baselines trained (alone, side by side, or as stacked
groups of seeds) and, when it stops, one line saying where each stands."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from meta.algorithm.ppo.weights import Weights
from meta.config import Config
from meta.evaluation.runs import JointBaseline
from meta.process.signals import Terminated
from meta.run.directory import latest_weights
from meta.runtime.executor import WORKER_LOST, Executor, stop_workers
from meta.runtime.jobs import Call


def train_joint(joint: JointBaseline) -> str:
    """Train one joint baseline (in whichever process runs it); returns its run directory."""
    from meta.trainer import train

    assert joint.train is not None
    return str(train(joint.train, joint.run_id))


def train_joint_group(joints: Sequence[JointBaseline]) -> list[str]:
    """Train joint baselines that differ only in seed as one group (meta.trainer.seeds), each
    meta-step's chunks stacked; returns their run directories."""
    from meta.trainer import train_group

    runs = [(joint.train, joint.run_id) for joint in joints if joint.train is not None]
    assert len(runs) == len(joints)
    return [str(d) for d in train_group(runs, ["meta-eval"])]


def _setting(joint: JointBaseline) -> Config:
    """What a joint baseline trains with, but for its seed and where it is written."""
    assert joint.train is not None
    return replace(joint.train, seed=0, results_dir="", resume=False, force=False)


def joint_weights(
    joints: Sequence[JointBaseline],
    executor: Executor,
    say: Callable[[str], None],
) -> list[Weights]:
    """Each baseline's weights, training those that need it first: those of one setting as one
    group of runs (meta.trainer.seeds), stacked, and the groups side by side.

    A stop (a run's Stopped, or a signal that reached this process outside a run, its runs
    being in workers) stops every pretraining, then is one Stopped: why, what each
    pretraining's directory holds, and meta-eval's way to go on."""
    from concurrent.futures.process import BrokenProcessPool

    from meta.trainer.session import FAILED, INTERRUPTED, TERMINATED, Stopped

    pending = [j for j in joints if j.train is not None]
    for joint in pending:
        say(
            "meta-eval: training the joint baseline (meta.algorithm=joint) in "
            f"{Path(joint.results_dir) / joint.run_id}"
        )
    groups: list[list[JointBaseline]] = []
    for joint in pending:
        same = next((g for g in groups if _setting(g[0]) == _setting(joint)), None)
        if same is None:
            groups.append([joint])
        else:
            same.append(joint)
    calls = [Call(train_joint_group, g) if len(g) > 1 else Call(train_joint, g[0]) for g in groups]
    try:
        for _ in executor.run(calls):
            pass
    except (Stopped, KeyboardInterrupt, Terminated, BrokenProcessPool) as error:
        stop_workers(executor)
        if isinstance(error, Stopped):
            reason, code = error.reason, error.code
        elif isinstance(error, BrokenProcessPool):
            reason, code = WORKER_LOST, FAILED
        else:
            reason = "interrupted"
            code = TERMINATED if isinstance(error, Terminated) else INTERRUPTED
        what = "interrupted" if reason == "interrupted" else f"stopped: {reason}"
        raise Stopped(f"joint pretraining {what}; {held(pending)}{AGAIN}", code) from None
    return [latest_weights(j.results_dir, j.run_id) for j in joints]


AGAIN = "; run this meta-eval again to go on from there"
"""How a meta-eval stopped in its joint pretraining goes on (each run resumes where it is)."""


def held(joints: Sequence[JointBaseline]) -> str:
    """What the joint baselines' run directories hold: `a and b hold meta-steps 0..4; c ...`."""
    from meta.trainer.seeds import COMPLETE, NO_META_STEP, NOT_BEGUN, holding, states_line

    states, places = [], []
    for joint in joints:
        assert joint.train is not None
        done = joint.committed
        where = Path(joint.results_dir) / joint.run_id
        if done >= joint.train.meta.steps:
            state = COMPLETE
        elif done > 0:
            state = holding(done)
        else:
            state = NO_META_STEP if where.exists() else NOT_BEGUN
        states.append(state)
        places.append(where)
    return states_line(places, states)
