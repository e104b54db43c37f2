"""eval.search: every start gets the same seeded trials; the held-out split uses the best."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tinyconfig import TINY_EVAL, compose_config

from meta.config import Config
from meta.evaluation.adapt import Setting
from meta.evaluation.evaluate import evaluate, plan_eval
from meta.evaluation.search import Search
from meta.trainer import train

Factory = Callable[..., Config]
SPACE = [
    "eval=search",
    "eval.search.trials=3",
    "eval.search.optimizer=[]",
    "eval.search.learning_rate=[0.001,0.03]",
    "eval.search.buffer_size=[]",
    "eval.search.num_epoch=[1,2]",
    "eval.search.batch_size=[]",
    "eval.search.reset=[[],[value_head,normalizer]]",
]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.heavy
def test_each_start_gets_its_trials_and_the_held_out_split_its_best(tiny_config: Factory) -> None:
    train(tiny_config("meta.steps=1"), "s")
    cfg = tiny_config("run_id=s", *TINY_EVAL, *SPACE, "eval.joint_run_id=s")
    evaluate(plan_eval(cfg, "s"))
    out = Path(cfg.results_dir) / "s" / "eval"
    rows = read_csv(out / "selection.csv")
    assert list(rows[0])[-2:] == ["selected", "trial"]
    starts = Counter((r["family"], r["method"]) for r in rows)
    assert set(starts.values()) == {3} and len(starts) == 6  # 2 families x 3 starts x 3 trials
    assert {r["split"] for r in rows} == {"train"}
    for family, method in starts:
        mine = [r for r in rows if (r["family"], r["method"]) == (family, method)]
        assert [r["trial"] for r in mine] == ["0", "1", "2"]
        (best,) = [r for r in mine if r["selected"] == "True"]
        steps = read_csv(out / "steps_to_80.csv")
        (held_out,) = [s for s in steps if (s["family"], s["method"]) == (family, method)]
        assert held_out["split"] == "test" and held_out["adaptation"] == best["adaptation"]
        adapted = read_csv(out / "adaptation.csv")
        labels = {
            a["adaptation"] for a in adapted if (a["family"], a["method"]) == (family, method)
        }
        assert labels == {best["adaptation"]}  # the held-out split: the best trial alone
    assert any("reset=value_head+normalizer" in r["adaptation"] for r in rows)
    assert len({r["adaptation"] for r in rows}) > 1  # the trials propose different procedures
    # the same seeds: the same trials (selection.csv byte for byte)
    elsewhere = "eval.out_dir=${results_dir}/again"
    again = tiny_config("run_id=s", *TINY_EVAL, *SPACE, "eval.joint_run_id=s", elsewhere)
    evaluate(plan_eval(again, "s"))
    copy = Path(cfg.results_dir) / "again" / "selection.csv"
    assert copy.read_text() == (out / "selection.csv").read_text()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.search.trials=0"], "eval.search.trials must be >= 1"),
        (["eval.search.learning_rate=[0.01,0.001]"], "0 < low < high"),
        (
            [f"eval.search.{k}=[]" for k in ("optimizer", "learning_rate", "buffer_size")]
            + [f"eval.search.{k}=[]" for k in ("num_epoch", "batch_size", "reset")],
            "eval.search declares an empty space",
        ),
        (["eval.search.reset=[[value_net]]"], r"eval.search.reset\[0\].reset: unknown reset"),
        (["eval.adaptation=[{learning_rate:0.01}]"], "eval.search and eval.adaptation"),
        (
            ["eval.search.learning_rate_schedule=[constant,cosine]"],
            r"eval.search.learning_rate_schedule\[1\].learning_rate_schedule: unknown schedule",
        ),
        (["eval.search.learning_rate_schedule=[linear,linear]"], "lists a choice twice"),
    ],
)
def test_bad_search_options_are_refused(
    tiny_config: Factory, overrides: list[str], message: str
) -> None:
    cfg = tiny_config("run_id=s", *TINY_EVAL, "eval=search", *overrides)
    with pytest.raises(ValueError, match=message):
        cfg.eval.validate()


@pytest.mark.heavy
def test_run_first_makes_the_runs_own_procedure_every_starts_first_trial(
    tiny_config: Factory,
) -> None:
    train(tiny_config("meta.steps=1"), "s")
    first = ["eval.search.run_first=true", "eval.search.learning_rate=[0.0001,0.03]"]
    cfg = tiny_config("run_id=s", *TINY_EVAL, *SPACE, *first, "eval.joint_run_id=s")
    evaluate(plan_eval(cfg, "s"))
    rows = read_csv(Path(cfg.results_dir) / "s" / "eval" / "selection.csv")
    opening = {r["adaptation"] for r in rows if r["trial"] == "0"}
    # the tiny run's Adam 3e-4 and 1 epoch; the buffer, not searched here, is eval.buffer_size
    assert opening == {"adam lr=0.0003 buffer=128 epochs=1"}, opening
    assert {r["adaptation"] for r in rows if r["trial"] != "0"} - opening  # then it searches


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], r"the run's ppo.learning_rate=0.0003 is outside eval.search.learning_rate"),
        (
            ["eval.search.learning_rate=[0.0001,0.03]", "eval.search.num_epoch=[2,3]"],
            r"the run's ppo.num_epoch=1 is not among eval.search.num_epoch=\[2, 3\]",
        ),
        (
            ["eval.search.learning_rate=[0.0001,0.03]", "eval.search.reset=[[critic]]"],
            r"eval.search.reset must list \[\] among its choices",
        ),
    ],
)
def test_run_first_refuses_a_run_whose_procedure_is_outside_the_space(
    tiny_config: Factory, overrides: list[str], message: str
) -> None:
    train(tiny_config("meta.steps=1"), "s")
    cfg = tiny_config("run_id=s", *TINY_EVAL, *SPACE, "eval.search.run_first=true", *overrides)
    with pytest.raises(ValueError, match=message):
        plan_eval(cfg, "s")
    assert not (Path(cfg.results_dir) / "s" / "eval").exists()


STUDY = Path(__file__).parents[2] / "experiments" / "archive" / "hidden_goal_small_search_first"


def _proposals(overrides: list[str], rounds: int) -> dict[tuple[str, str, str], list[str]]:
    """Each start's first `rounds` proposals of the committed study's search (scores: 0)."""
    study = OmegaConf.load(STUDY.with_suffix(".yaml"))
    cfg = compose_config([*study.train, *study.eval, *overrides])
    rows = read_csv(STUDY / "selection.csv")
    keys = list(dict.fromkeys((r["family"], r["method"], r["pretraining"]) for r in rows))
    search = Search(Setting(cfg, cfg.eval, seed=0), keys)
    for _ in range(rounds):
        search.ask()
        for study_ in search.studies.values():
            study_.tell(study_.trials[-1].number, 0.0)
    return {key: search.tried[key] for key in keys}


def test_the_default_schedule_choice_proposes_the_committed_studys_trials() -> None:
    # TPE samples at random for the first 8 of 16 trials: those do not depend on the scores,
    # so the space left at learning_rate_schedule=[constant] must propose what the study tried
    rows = read_csv(STUDY / "selection.csv")
    committed: dict[tuple[str, str, str], list[str]] = {}
    for r in rows:
        committed.setdefault((r["family"], r["method"], r["pretraining"]), []).append(
            r["adaptation"]
        )
    proposed = _proposals([], 8)
    assert len(proposed) == 5
    assert proposed == {key: labels[:8] for key, labels in committed.items()}
    assert _proposals(["eval.search.learning_rate_schedule=[]"], 8) == proposed


def test_two_schedules_are_searched_and_run_first_opens_at_a_constant_rate() -> None:
    proposed = _proposals(["eval.search.learning_rate_schedule=[constant,linear]"], 8)
    labels = [label for trials in proposed.values() for label in trials]
    assert {trials[0] for trials in proposed.values()} == {
        "sgd lr=0.1 buffer=512 epochs=3 batch=512"
    }
    assert any(label.endswith("schedule=linear") for label in labels)
    assert any("schedule" not in label for trials in proposed.values() for label in trials[1:])
    assert not any("schedule=constant" in label for label in labels)  # null is constant


def test_run_first_needs_a_constant_schedule_among_the_choices(tiny_config: Factory) -> None:
    space = [*SPACE, "eval.search.learning_rate=[0.0001,0.03]"]
    cfg = tiny_config(*TINY_EVAL, *space, "eval.search.learning_rate_schedule=[linear]")
    assert cfg.eval.search is not None
    with pytest.raises(ValueError, match="must list constant among its choices"):
        cfg.eval.search.run_procedure(cfg.ppo)
    both = replace(cfg.eval.search, learning_rate_schedule=["linear", "constant"])
    assert both.run_procedure(cfg.ppo)["learning_rate_schedule"] == "constant"
    alone = replace(cfg.eval.search, learning_rate_schedule=["constant"])
    assert "learning_rate_schedule" not in alone.run_procedure(cfg.ppo)  # not searched
