"""Properties of the one inner PPO, whose every training is a stack of k members.

A member's bits do not depend on which others share its stack, nor on k (>= 2); members are
independent of each other; a stack of one (a training alone) takes a single network's kernels
and equals a member of a stack to TOLERANCE, with every option a training can take.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import envs
from meta.algorithm.ppo import update
from meta.algorithm.ppo.hyper import Hyper, RunSchedule
from meta.algorithm.ppo.network import pieces, policy_for
from meta.algorithm.ppo.optim import optimizer_steps
from meta.algorithm.ppo.rollout import Collection, Cores, Rollout
from meta.algorithm.ppo.train import Stack, train_stack
from meta.algorithm.ppo.weights import Weights, cpu_weights
from meta.algorithm.request import Task, TrainRequest, TrainResult
from meta.algorithm.training import stack_key, train, train_requests
from meta.config import EnvConfig
from meta.config.ppo import NetworkConfig, PPOConfig, SelfPlayConfig
from meta.observe.tags import ELO, LEARNING_RATE, SUCCESS, WIN_RATE
from meta.runtime.envpool import EnvPool
from meta.runtime.jobs import MAX_STACK, Call, Training, request_env, stacks, units

PPO = PPOConfig(max_steps=1024, buffer_size=512, batch_size=128, num_epoch=2)
NETWORK = NetworkConfig(hidden_units=32)
TOLERANCE = 1e-5
"""max |Δ| over the weights (and Adam's moments) between a training alone and the same training
as a member of a stack, after a few updates. A stack of one takes a single network's kernels
(`F.linear`, i.e. addmm; fused Adam; clip_grad_norm_; 0-dim scalar arithmetic), a stack of
several batched products (baddbmm), foreach Adam and per-member clips: the same formulas,
whose sums are grouped, and so rounded, differently. Measured: at most 1.2e-7 (a couple of
float32 ulps near 1) after the trainings here, the meta-gradients and ghosts included."""
POOL = EnvPool(EnvConfig(num_areas=8))
TASKS = (Task("FindTarget", {}), Task("CarryObject", {}), Task("FindTarget", {"goal_x": 0.5}))


def _theta() -> Weights:
    return cpu_weights(policy_for(POOL.env("FindTarget", {}, 0), NETWORK, seed=5))


def _requests(ppo: PPOConfig = PPO, **fields: object) -> list[TrainRequest]:
    """Three requests from one start: each its own task and seed."""
    theta = _theta()
    return [
        TrainRequest((task,), theta, 40 + i, ppo, NETWORK, **fields)  # type: ignore[arg-type]
        for i, task in enumerate(TASKS)
    ]


def _alone(request: TrainRequest) -> TrainResult:
    return train(request, request_env(POOL, request))


def _stacked(requests: list[TrainRequest], **options: bool) -> list[TrainResult]:
    return train_requests(requests, [request_env(POOL, r) for r in requests], **options)


def _delta(a: Weights, b: Weights) -> float:
    assert list(a) == list(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _same(a: Weights, b: Weights) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def _moments(state: dict | None) -> Weights:
    assert state is not None
    return {f"{i}.{n}": s[n] for i, s in state["state"].items() for n in ("exp_avg", "exp_avg_sq")}


def _as_alone(requests: list[TrainRequest]) -> tuple[list[TrainResult], list[TrainResult]]:
    """Each request trained alone, and all as one stack; each member held to its training
    alone within TOLERANCE, and to have trained."""
    alone = [_alone(r) for r in requests]
    stacked = _stacked(requests)
    for a, s, r in zip(alone, stacked, requests, strict=True):
        if r.weights is not None:
            assert _delta(a.weights, r.weights) > 100 * TOLERANCE  # it did train
        assert _delta(a.weights, s.weights) < TOLERANCE
        assert a.stats["steps"] == s.stats["steps"] and a.stats["episodes"] == s.stats["episodes"]
        assert a.stats[SUCCESS] == pytest.approx(s.stats[SUCCESS], nan_ok=True)
        assert len(a.updates) == len(s.updates)
    return alone, stacked


# (a) a member's bits are the same in any stack of two or more


def test_a_member_trains_bitwise_the_same_whichever_others_share_its_stack() -> None:
    a, b, c = _requests(replace(PPO, max_grad_norm=0.05))  # a clip acting every step
    d = replace(c, tasks=(Task("CarryObject", {"motor_rotation": 30.0}),), seed=7)
    pair, three, four = _stacked([a, b]), _stacked([b, c, a]), _stacked([c, b, d, a])
    for alone, among in ((pair[0], three[2]), (pair[0], four[3]), (pair[1], four[1])):
        assert _same(alone.weights, among.weights)
        assert repr(alone.updates) == repr(among.updates)  # NaN where no episode ended


# (b) a stack of one is a member of a stack, to rounding


@pytest.mark.parametrize(
    "ppo",
    [PPO, replace(PPO, optimizer="sgd", learning_rate=0.05), replace(PPO, max_grad_norm=0.01)],
    ids=["adam", "sgd", "clipped"],
)
def test_a_stack_of_one_is_a_member_of_a_stack_to_the_tolerance(ppo: PPOConfig) -> None:
    _, stacked = _as_alone(_requests(ppo))
    # members differ from each other: each has its own task and random stream
    assert _delta(stacked[0].weights, stacked[1].weights) > 100 * TOLERANCE


# (c) members are independent


def test_changing_one_members_task_and_seed_leaves_the_others_bits() -> None:
    a, b, c = _requests()
    other = replace(b, tasks=(Task("CarryObject", {"motor_rotation": 30.0}),), seed=9)
    first, second = _stacked([a, b, c]), _stacked([a, other, c])
    assert _same(first[0].weights, second[0].weights)
    assert _same(first[2].weights, second[2].weights)
    assert repr(first[2].updates) == repr(second[2].updates)
    assert _delta(first[1].weights, second[1].weights) > 100 * TOLERANCE


def test_members_of_their_own_rates_betas_epsilons_and_schedules_stack_as_in_any_stack() -> None:
    own = [
        replace(PPO, learning_rate=1e-3, beta=0.02, epsilon=0.3),
        replace(PPO, learning_rate=5e-4, beta_schedule="constant", epsilon_schedule="constant"),
        replace(PPO, learning_rate=2e-4, beta=0.0, learning_rate_schedule="constant"),
    ]
    requests = [replace(r, ppo=p) for r, p in zip(_requests(), own, strict=True)]
    assert stacks([Training(r) for r in requests]) == [[0, 1, 2]]
    three = _stacked(requests)
    for request, among in zip(requests, three, strict=True):
        (beside,) = _stacked([replace(requests[0], ppo=PPO, seed=9), request])[1:]
        assert _same(among.weights, beside.weights)
        assert repr(among.updates) == repr(beside.updates)
        assert among.updates[0][LEARNING_RATE] == request.ppo.learning_rate


# (d) every option, a stack of three as three trainings alone


@pytest.mark.parametrize(
    "ppo",
    [
        replace(PPO, ratio="per_dimension"),
        replace(PPO, entropy="mean", beta=0.05),
        replace(PPO, advantage_normalization="buffer"),
        replace(PPO, optimizer="sgd", learning_rate=0.05),
        replace(PPO, action_scale=3.0),
        replace(PPO, action_scale=3.0, optimizer="sgd", learning_rate=0.05),
    ],
    ids=["per_dimension", "entropy_mean", "buffer_advantages", "sgd", "action_scale", "sgd_scale"],
)
def test_an_option_in_a_stack_of_three_trains_each_as_alone(ppo: PPOConfig) -> None:
    _as_alone(_requests(ppo))


def test_a_normalised_fresh_start_in_a_stack_trains_as_alone() -> None:
    network = replace(NETWORK, normalize=True)
    requests = [replace(r, weights=None, network=network) for r in _requests()]
    alone, stacked = _as_alone(requests)
    for a, s in zip(alone, stacked, strict=True):
        assert float(a.weights["normalizer.count"]) == float(s.weights["normalizer.count"]) > 0


PIECES = replace(PPO, buffer_assembly="pieces", buffer_size=400, time_horizon=16)
"""ML-Agents' buffers of whole pieces: each member's buffers of their own lengths, and over a
training its own number of updates."""


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalised"])
def test_buffers_of_pieces_in_a_stack_train_each_as_alone(normalize: bool) -> None:
    requests = _requests(PIECES)
    if normalize:
        network = replace(NETWORK, normalize=True)
        requests = [replace(r, weights=None, network=network) for r in requests]
    alone, stacked = _as_alone(requests)
    # the members filled their buffers at their own steps: not one length for all
    lengths = {tuple(u["steps"] for u in s.updates) for s in stacked}
    assert len(lengths) > 1
    for a, s in zip(alone, stacked, strict=True):
        assert [u["steps"] for u in a.updates] == [u["steps"] for u in s.updates]


def test_a_member_of_pieces_trains_bitwise_the_same_whichever_others_share_its_stack() -> None:
    a, b, c = _requests(replace(PIECES, max_grad_norm=0.05))
    d = replace(c, tasks=(Task("CarryObject", {"motor_rotation": 30.0}),), seed=7)
    pair, four = _stacked([a, b]), _stacked([c, b, d, a])
    for alone, among in ((pair[0], four[3]), (pair[1], four[1])):
        assert _same(alone.weights, among.weights)
        assert repr(alone.updates) == repr(among.updates)


def _chunk(k: int, seed: int, ppo: PPOConfig = PPO) -> TrainRequest:
    """Chunk k of a 4-chunk run of two tasks side by side, Adam's state given back."""
    start = Hyper.of(ppo)
    schedule = RunSchedule(start, Hyper(1e-5, 1e-4, 0.1), k * ppo.max_steps, 4 * ppo.max_steps)
    tasks = (Task("FindTarget", {"goal_x": 0.5}), Task("FindTarget", {"motor_rotation": 40.0}))
    return TrainRequest(
        tasks, _theta(), 100 * seed + k, ppo, NETWORK, schedule=schedule, returns_optimizer=True
    )


def _then(request: TrainRequest, result: TrainResult) -> TrainRequest:
    return request.carrying(weights=result.weights, optimizer_state=result.optimizer_state)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_carried_optimizer_states_at_different_steps_train_in_a_stack_as_alone(
    optimizer: str,
) -> None:
    ppo = replace(PPO, optimizer=optimizer, learning_rate=3e-4 if optimizer == "adam" else 0.05)
    # member 0 continues after one chunk, member 1 after two, member 2 starts afresh
    one = _then(_chunk(1, 1, ppo), _alone(_chunk(0, 1, ppo)))
    two = _then(_chunk(2, 2, ppo), _alone(_then(_chunk(1, 2, ppo), _alone(_chunk(0, 2, ppo)))))
    requests = [one, two, _chunk(0, 3, ppo)]
    steps = [optimizer_steps(r.optimizer_state) for r in requests]
    # a chunk: 2 updates of 2 epochs of 4 minibatches (16 agents, buffers of 512, batches of 128)
    assert steps == ([16, 32, 0] if optimizer == "adam" else [0, 0, 0])
    assert all(stack_key(r) == stack_key(one) for r in requests)  # they stack together
    alone, stacked = _as_alone(requests)
    for a, s, before in zip(alone, stacked, steps, strict=True):
        assert a.optimizer_state is not None and s.optimizer_state is not None
        assert s.optimizer_state["param_groups"] == a.optimizer_state["param_groups"]
        assert optimizer_steps(s.optimizer_state) == optimizer_steps(a.optimizer_state)
        assert _moments(s.optimizer_state).keys() == _moments(a.optimizer_state).keys()
        if optimizer == "adam":
            assert optimizer_steps(a.optimizer_state) == before + 16
            assert _delta(_moments(a.optimizer_state), _moments(s.optimizer_state)) < TOLERANCE
    # what a stack gives back continues alone as what a training alone gives back
    again = [_alone(_then(_chunk(3, 2, ppo), r)) for r in (alone[1], stacked[1])]
    assert _delta(again[0].weights, again[1].weights) < TOLERANCE


def test_zero_updates_give_back_each_start() -> None:
    requests = _requests(updates=0, snapshots=(0,))
    requests[2] = replace(requests[2], weights=None)  # a fresh start from its seed
    for results in ([_alone(r) for r in requests], _stacked(requests)):
        for result, request in zip(results, requests, strict=True):
            start = request.weights or cpu_weights(
                policy_for(request_env(POOL, request), NETWORK, seed=request.seed)
            )
            assert _same(result.weights, start) and _same(result.snapshots[0], start)
            assert result.updates == [] and result.stats == {}


def test_snapshots_of_a_stack_are_those_of_each_training_alone() -> None:
    requests = _requests(updates=2, snapshots=(0, 1, 2))
    requests[1] = replace(requests[1], snapshots=(1,))  # each member its own
    alone, stacked = _as_alone(requests)
    again = _stacked(requests)
    for a, s, g, r in zip(alone, stacked, again, requests, strict=True):
        assert sorted(s.snapshots) == sorted(a.snapshots) == list(r.snapshots)
        for n, weights in s.snapshots.items():
            assert _delta(weights, a.snapshots[n]) < TOLERANCE
            assert _same(weights, g.snapshots[n])  # deterministic
        if 0 in r.snapshots:
            assert _same(s.snapshots[0], r.weights)  # type: ignore[arg-type]
        if 2 in r.snapshots:
            assert _same(s.snapshots[2], s.weights)


def test_fomaml_meta_gradients_of_a_stack_are_those_of_each_training_alone() -> None:
    requests = _requests(meta_gradient=True)
    alone, stacked = _as_alone(requests)
    for a, s in zip(alone, stacked, strict=True):
        assert a.meta_gradient is not None and s.meta_gradient is not None
        assert max(float(g.abs().max()) for g in a.meta_gradient.values()) > 100 * TOLERANCE
        assert _delta(a.meta_gradient, s.meta_gradient) < TOLERANCE
        # the meta-gradient's buffer counts in the training's steps, alone as in a stack
        assert a.stats["steps"] == s.stats["steps"] > 1024


SELF_PLAY = SelfPlayConfig(save_steps=300, swap_steps=100, team_change=700, window=3)
GAMES = (Task("Sumo", {}), Task("Sumo", {"arena_size": 3.2}), Task("Sumo", {"max_step": 40}))


def test_games_in_a_stack_train_each_with_its_own_ghost_as_alone() -> None:
    ppo = replace(PPO, self_play=SELF_PLAY)
    start = cpu_weights(policy_for(POOL.env("Sumo", {}, 0), NETWORK, seed=5))
    requests = [TrainRequest((task,), start, 60 + i, ppo, NETWORK) for i, task in enumerate(GAMES)]
    requests[1] = replace(requests[1], self_play_state={"elo": 1300.0})  # its own ELO
    alone, stacked = _as_alone(requests)
    elos = []
    for a, s in zip(alone, stacked, strict=True):
        assert a.self_play_state is not None and s.self_play_state is not None
        assert s.stats[ELO] == pytest.approx(a.stats[ELO], abs=1e-6)
        assert s.stats[WIN_RATE] == pytest.approx(a.stats[WIN_RATE], nan_ok=True)
        assert s.stats["games"] == a.stats["games"]
        assert s.self_play_state["elo"] == pytest.approx(a.self_play_state["elo"], abs=1e-6)
        ghost, mine = a.self_play_state["ghost"], s.self_play_state["ghost"]
        assert mine["learning_team"] == ghost["learning_team"]
        assert len(mine["snapshots"]) == len(ghost["snapshots"])
        for theirs, ours in zip(ghost["snapshots"], mine["snapshots"], strict=True):
            assert _delta(theirs, ours) < TOLERANCE
        elos.append(s.stats[ELO])
    assert len(set(elos)) == 3  # each member its own ghost and ELO


def test_a_game_beside_tasks_leaves_how_the_tasks_train_unchanged() -> None:
    # games collect member by member and tasks in lockstep: a game among the requests trains
    # in a stack of its own kind, and the tasks' members keep their bits
    ppo = replace(PPO, self_play=SELF_PLAY)
    tasks = _requests(ppo)
    game = TrainRequest((GAMES[0],), tasks[0].weights, 70, ppo, NETWORK)
    without = _stacked(tasks)
    mixed = _stacked([tasks[0], game, tasks[1], tasks[2]])
    for a, b in zip(without, [mixed[0], *mixed[2:]], strict=True):
        assert _same(a.weights, b.weights) and repr(a.updates) == repr(b.updates)
    assert mixed[1].self_play_state is not None and ELO in mixed[1].stats


def test_networks_of_other_shapes_among_the_requests_train_in_stacks_of_their_own() -> None:
    # members that cannot share a stack (other shapes: another width here, other observation
    # or action specs from other environments) are grouped, never refused
    tasks = _requests()
    wide = replace(NETWORK, hidden_units=48)
    start = cpu_weights(policy_for(POOL.env("FindTarget", {}, 0), wide, seed=1))
    others = [replace(r, weights=start, network=wide, seed=r.seed + 9) for r in tasks[:2]]
    mixed = _stacked([tasks[0], others[0], tasks[1], others[1], tasks[2]])
    for a, b in zip(_stacked(tasks) + _stacked(others), mixed[::2] + mixed[1::2], strict=True):
        assert _same(a.weights, b.weights) and repr(a.updates) == repr(b.updates)


# bitwise guarantees of how a stack is cut and stepped


def test_a_stack_is_deterministic() -> None:
    requests = _requests(updates=2)
    first, again = _stacked(requests), _stacked(requests)
    for a, b in zip(first, again, strict=True):
        assert _same(a.weights, b.weights) and repr(a.updates) == repr(b.updates)


def _merging(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A count of the buffers collected by stepping the stack's tasks as one core."""
    calls = [0]
    collect = Collection.collect

    def counted(self: Collection, *args: object, **kwargs: object) -> list[Rollout]:
        calls[0] += any(isinstance(group, Cores) for group in self.groups)
        return collect(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Collection, "collect", counted)
    return calls


def test_tasks_stepped_as_one_core_train_bitwise_as_each_environment_by_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # FOMAML's meta-gradient collects a buffer more from each environment after the training,
    # so it also checks that each environment goes on from where the stack left it
    merging = _merging(monkeypatch)
    a, b, c = _requests(meta_gradient=True, snapshots=(1,))
    hidden = replace(c, tasks=(Task("FindTarget", {"hidden_goal": 1, "goal_x": -0.4}),), seed=3)
    requests = [a, b, c, hidden, replace(b, seed=11)]
    merged = _stacked(requests, merge=True)
    assert merging[0] > 0  # the stack did step its tasks as one core
    apart = _stacked(requests, merge=False)
    for m, s in zip(merged, apart, strict=True):
        assert m.meta_gradient is not None and s.meta_gradient is not None
        assert _same(m.weights, s.weights) and _same(m.meta_gradient, s.meta_gradient)
        assert _same(m.snapshots[1], s.snapshots[1])
        assert repr(m.updates) == repr(s.updates)  # NaN where a buffer finished no episode
        assert repr({**m.stats, "wall_time_s": 0}) == repr({**s.stats, "wall_time_s": 0})
    assert sum(m.stats["episodes"] for m in merged) > 0


def test_tasks_side_by_side_step_in_their_families_cores_bitwise_as_each_member_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    merging = _merging(monkeypatch)
    mixed = (Task("CarryObject", {}), Task("FindTarget", {"goal_x": -0.3}))
    network = replace(NETWORK, normalize=True)
    requests = [
        replace(_chunk(0, 1), tasks=mixed, network=network, weights=None),
        replace(_chunk(0, 2), network=network, weights=None),
        replace(_chunk(0, 3), tasks=mixed[::-1], network=network, weights=None),
    ]
    merged = _stacked(requests, merge=True)
    assert merging[0] > 0  # one core per family
    apart = _stacked(requests, merge=False)
    for m, s in zip(merged, apart, strict=True):
        assert _same(m.weights, s.weights)
        assert _same(_moments(m.optimizer_state), _moments(s.optimizer_state))
        assert repr(m.updates) == repr(s.updates)
        assert repr({**m.stats, "wall_time_s": 0}) == repr({**s.stats, "wall_time_s": 0})
    assert sum(m.stats["episodes"] for m in merged) > 0


def test_a_stack_trained_by_pieces_is_bitwise_the_stack_trained_in_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b, c = _requests(replace(PPO, max_grad_norm=0.05))
    requests = [a, b, c, replace(a, seed=3), replace(b, seed=4)]
    whole = _stacked(requests)
    monkeypatch.setattr(update, "PIECE", 2)  # pieces of 3 and 2 members, gradients added in place
    assert update.pieces(len(requests), update.PIECE) == [slice(0, 3), slice(3, 5)]
    by_pieces = _stacked(requests)
    for one, other in zip(whole, by_pieces, strict=True):
        assert _same(one.weights, other.weights)
        assert repr(one.updates) == repr(other.updates)


@pytest.mark.parametrize("k", [1, 2, 5, 8, 9, 16, 17, 64])
def test_pieces_cover_the_stack_and_none_holds_one_member_of_several(k: int) -> None:
    parts = pieces(k, 8)
    assert [i for part in parts for i in range(k)[part]] == list(range(k))
    sizes = [part.stop - part.start for part in parts]
    assert max(sizes) - min(sizes) <= 1 and (k < 8 or min(sizes) >= 8) and max(sizes) < max(16, k)


# which requests stack together


def test_only_requests_of_one_setting_stack_together() -> None:
    a, b, c = _requests()
    other = replace(a, ppo=replace(PPO, buffer_size=256))
    two = replace(c, tasks=(Task("FindTarget", {}), Task("CarryObject", {})))
    jobs = [Training(a), Training(other), Training(b), Call(abs, -1), Training(two)]
    assert stacks([*jobs, Training(replace(other, seed=9))]) == [[0, 2], [1, 5]]
    assert stacks(jobs) == [[0, 2]]  # a stack of one is no stack
    # options that once trained apart stack now: per-dimension ratios, games
    per_dimension = [replace(r, ppo=replace(PPO, ratio="per_dimension")) for r in (a, b)]
    assert stack_key(per_dimension[0]) == stack_key(per_dimension[1])
    # a member's own rates stack; what the stack reads from its first member does not
    assert stack_key(replace(a, ppo=replace(PPO, learning_rate=1e-3, beta=0.0))) == stack_key(a)
    assert stack_key(replace(a, ppo=replace(PPO, gamma=0.9))) != stack_key(a)


def test_chains_at_different_steps_stack_together_and_task_counts_apart() -> None:
    first = _chunk(0, 1)
    continued = _then(_chunk(1, 2), _alone(_chunk(0, 2)))
    one_task = replace(_chunk(0, 3), tasks=_chunk(0, 3).tasks[:1])
    assert optimizer_steps(continued.optimizer_state) > 0
    assert stack_key(first) == stack_key(continued) != stack_key(one_task)
    jobs = [Training(first), Training(continued), Training(one_task), Training(_chunk(0, 4))]
    assert stacks(jobs) == [[0, 1, 3]]


def test_more_than_a_full_stack_splits_evenly_leaving_none_alone() -> None:
    request = _requests()[0]
    jobs = [Training(replace(request, seed=i)) for i in range(MAX_STACK + 1)]
    assert [len(s) for s in stacks(jobs)] == [33, 32]
    assert sorted(i for s in stacks(jobs) for i in s) == list(range(MAX_STACK + 1))


@pytest.mark.parametrize(
    ("size", "parts", "cut"), [(4, 2, [2, 2]), (3, 2, [3]), (2, 4, [2]), (5, 2, [3, 2])]
)
def test_workers_share_a_stack_and_none_trains_alone(size: int, parts: int, cut: list[int]) -> None:
    request = _requests()[0]
    jobs = [Training(replace(request, seed=i)) for i in range(size)]
    shared = units(jobs, parts)
    assert [len(where) for where, _ in shared] == cut
    assert sorted(i for where, _ in shared for i in where) == list(range(size))


def test_a_bad_learning_rate_is_refused_for_any_member() -> None:
    requests = _requests()
    requests[1] = replace(requests[1], hyper=Hyper(0.0, 5e-3, 0.2))
    with pytest.raises(ValueError, match="learning_rate must be > 0"):
        _stacked(requests)


@pytest.mark.parametrize("merge", [True, False])
def test_environments_of_different_agent_counts_are_refused(merge: bool) -> None:
    cfg = replace(PPO, max_steps=256, buffer_size=128, batch_size=64)
    theta, start = _theta(), Hyper.of(cfg)
    stack = Stack(
        [theta, theta], cfg, False, 1e-8, "cpu", [0, 1], [lambda _: start] * 2, [None, None]
    )
    four, eight = (envs.make("FindTarget", num_areas=n, seed=0) for n in (4, 8))
    with pytest.raises(ValueError, match="the same number of agents in every environment"):
        train_stack(stack, [four, eight], merge=merge)
