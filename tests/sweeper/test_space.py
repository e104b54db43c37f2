"""hydra.sweeper.params in Hydra's override grammar, read as Optuna distributions."""

from __future__ import annotations

import pytest

pytest.importorskip("optuna")

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hydra_plugins.meta_harness_sweeper._space import search_space


def space_of(**params: str) -> dict[str, object]:
    """The distributions (or fixed values) of `key=value` entries."""
    space = search_space([(f"hydra.sweeper.params.{k}", f"{k}={v}") for k, v in params.items()])
    return {**space.distributions, **space.fixed}


def test_the_grammar_reads_as_hydras_optuna_sweeper_read_it() -> None:
    read = space_of(
        a="interval(0.05, 1.0)",
        b="int(interval(1, 64))",
        c="tag(log, interval(0.0001, 0.1))",
        d="tag(log, int(interval(8, 512)))",
        e="choice(2048, 4096, 8192)",
        f="1,2",
        g="range(1, 9, 2)",
        h="range(0.0, 1.0, 0.25)",
        i="shuffle(range(1, 4))",
        j="choice(relu, tanh)",
        l="choice([1, 2], [3])",
        k="7",
    )
    assert read == {
        "a": FloatDistribution(0.05, 1.0),
        "b": IntDistribution(1, 64),
        "c": FloatDistribution(0.0001, 0.1, log=True),
        "d": IntDistribution(8, 512, log=True),
        "e": CategoricalDistribution([2048, 4096, 8192]),
        "f": CategoricalDistribution([1, 2]),
        "g": IntDistribution(1, 9, step=2),  # the high end included, as Optuna's range
        "h": FloatDistribution(0.0, 1.0, step=0.25),
        "i": CategoricalDistribution([1, 2, 3]),
        "j": CategoricalDistribution(["relu", "tanh"]),
        "k": "7",
        "l": CategoricalDistribution(["[1,2]", "[3]"]),  # as overrides write them
    }


def test_a_later_entry_of_a_key_wins_and_a_fixed_value_removes_its_range() -> None:
    space = search_space(
        [("hydra.sweeper.params.x", "x=interval(0, 1)"), ("the command line", "x=0.5")]
    )
    assert space.distributions == {} and space.fixed == {"x": "0.5"}


def test_the_corners_give_every_choice_and_both_ends_of_every_interval() -> None:
    space = search_space(
        [
            ("p", "meta.outer_lr=interval(0.05, 1.0)"),
            ("p", "ppo.max_steps=choice(2048, 4096, 8192)"),
            ("p", "meta.steps=3"),
        ]
    )
    assert space.corners() == [
        ["meta.steps=3", "meta.outer_lr=0.05", "ppo.max_steps=2048"],
        ["meta.steps=3", "meta.outer_lr=1.0", "ppo.max_steps=4096"],
        ["meta.steps=3", "meta.outer_lr=0.05", "ppo.max_steps=8192"],
    ]


def test_the_grid_takes_choices_and_ranges() -> None:
    space = search_space([("p", "a=choice(x, y)"), ("p", "b=range(1, 3)")])
    assert space.grid() == {"a": ["x", "y"], "b": [1, 2, 3]} and space.size() == 6
    with pytest.raises(ValueError, match="not a continuous interval"):
        search_space([("p", "a=interval(0, 1)")]).grid()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("x=interval(1.0, 0.5)", "x=interval(1.0, 0.5): the interval's low 1.0 is above its high"),
        ("x=int(interval(9, 2))", "the interval's low 9 is above its high 2"),
        ("x=range(5, 1)", "the range's low 5 is above its high 1"),
        ("x=choice()", "empty choice is not legal"),
        ("x=glob(*)", "Glob is not a search space"),
        ("x=tag(log, interval(0.0, 1.0))", "x=tag(log, interval(0.0, 1.0)): "),
        ("x=interval(0, 1", "x=interval(0, 1: "),
    ],
)
def test_a_space_that_cannot_be_sampled_is_one_line_naming_its_entry(
    entry: str, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        search_space([("hydra.sweeper.params.x", entry)])
    text = str(raised.value)
    assert text.startswith(f"hydra.sweeper.params.x: {entry}: ") and "\n" not in text
    assert message in text
