"""Samplers: ranges, moments, multirange interval weights, seeds and parsing errors.

Moment checks use many draws from a fixed seed and a tolerance of 5 standard errors of the
estimate: the tests are deterministic, and the margin shows they are not tuned to the seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from meta.curriculum.samplers import (
    ConstantSampler,
    GaussianSampler,
    MultiRangeUniformSampler,
    UniformSampler,
    parse_sampler,
)

N = 40_000


def draws(raw: object, seed: int = 0, n: int = N) -> np.ndarray:
    sampler = parse_sampler(raw, "p")
    rng = np.random.default_rng(seed)
    return np.array([sampler.draw(rng) for _ in range(n)])


def test_number_is_constant() -> None:
    assert parse_sampler(3, "p") == ConstantSampler(value=3.0)
    assert parse_sampler(
        {"sampler_type": "constant", "sampler_parameters": {"value": 0.5}}, "p"
    ) == ConstantSampler(value=0.5)
    assert set(draws(2.5, n=10)) == {2.5}


def test_defaults_are_ml_agents_defaults() -> None:
    def parsed(kind: str) -> object:
        return parse_sampler({"sampler_type": kind, "sampler_parameters": {}}, "p")

    assert parsed("uniform") == UniformSampler(0.0, 1.0)
    assert parsed("gaussian") == GaussianSampler(1.0, 1.0)
    assert parsed("multirangeuniform") == MultiRangeUniformSampler(((0.0, 1.0),))
    assert parsed("constant") == ConstantSampler(0.0)


def test_uniform_range_and_moments() -> None:
    x = draws({"sampler_type": "uniform", "sampler_parameters": {"min_value": 2, "max_value": 5}})
    assert x.min() >= 2.0 and x.max() <= 5.0
    # mean 3.5, variance (b-a)^2/12 = 0.75; SE(mean) = sqrt(0.75/N) ~ 0.0043,
    # SE(var) = sqrt((mu4 - var^2)/N) with mu4 = (b-a)^4/80 ~ 0.0034.
    assert abs(x.mean() - 3.5) < 5 * math.sqrt(0.75 / N)
    assert abs(x.var() - 0.75) < 5 * math.sqrt((81 / 80 - 0.75**2) / N)


def test_gaussian_moments() -> None:
    x = draws({"sampler_type": "gaussian", "sampler_parameters": {"mean": 2, "st_dev": 0.3}})
    # SE(mean) = 0.3/sqrt(N); SE(std) ~ 0.3/sqrt(2N) for a normal sample.
    assert abs(x.mean() - 2.0) < 5 * 0.3 / math.sqrt(N)
    assert abs(x.std() - 0.3) < 5 * 0.3 / math.sqrt(2 * N)


def test_gaussian_zero_st_dev_is_the_mean() -> None:
    x = draws({"sampler_type": "gaussian", "sampler_parameters": {"mean": 4, "st_dev": 0}}, n=5)
    assert set(x) == {4.0}


def test_multirange_picks_intervals_in_proportion_to_length() -> None:
    raw = {
        "sampler_type": "multirangeuniform",
        "sampler_parameters": {"intervals": [[0, 1], [10, 13]]},
    }
    x = draws(raw)
    first = (x >= 0) & (x <= 1)
    second = (x >= 10) & (x <= 13)
    assert np.all(first | second)
    # P(first) = 1 / (1 + 3); SE = sqrt(p (1-p) / N) ~ 0.0022.
    assert abs(first.mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / N)
    # Within an interval the value is uniform: mean of the second part ~ 11.5, SE sqrt(0.75/n).
    assert abs(x[second].mean() - 11.5) < 5 * math.sqrt(0.75 / second.sum())


def test_multirange_zero_length_intervals() -> None:
    point_and_range = {
        "sampler_type": "multirangeuniform",
        "sampler_parameters": {"intervals": [[5, 5], [0, 1]]},
    }
    assert not np.any(draws(point_and_range, n=2000) == 5.0)
    points = {
        "sampler_type": "multirangeuniform",
        "sampler_parameters": {"intervals": [[2, 2], [3, 3]]},
    }
    x = draws(points, n=4000)
    assert set(x) == {2.0, 3.0}
    assert abs((x == 2.0).mean() - 0.5) < 5 * math.sqrt(0.25 / 4000)


def test_seed_is_parsed_and_minus_one_means_unseeded() -> None:
    seeded = parse_sampler({"sampler_type": "uniform", "sampler_parameters": {"seed": 7}}, "p")
    unseeded = parse_sampler({"sampler_type": "uniform", "sampler_parameters": {"seed": -1}}, "p")
    assert seeded.seed == 7 and unseeded.seed == -1


def test_yaml_1_1_exponent_strings_are_numbers() -> None:
    # PyYAML reads `1e-3` (no dot) as a string; ML-Agents' cattrs turns it into a float.
    raw = {"sampler_type": "uniform", "sampler_parameters": {"min_value": "1e-3", "max_value": 1}}
    assert parse_sampler(raw, "p") == UniformSampler(0.001, 1.0)


def u(**params: object) -> dict[str, object]:
    return {"sampler_type": "uniform", "sampler_parameters": params}


def mr(intervals: object) -> dict[str, object]:
    return {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": intervals}}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            u(min_value=5, max_value=1),
            r"^p\.sampler_parameters: min_value 5\.0 is greater than max_value 1\.0$",
        ),
        (
            mr([[0, 1], [3, 1]]),
            r"^p\.sampler_parameters\.intervals\[1\]: min 3\.0 is greater than max 1\.0$",
        ),
        (
            mr([[0, 1, 2]]),
            r"^p\.sampler_parameters\.intervals\[0\]: an interval must be \[min, max\]",
        ),
        (mr([]), r"^p\.sampler_parameters\.intervals: expected a non-empty list"),
        (mr("0-1"), r"^p\.sampler_parameters\.intervals: expected a non-empty list"),
        (
            {"sampler_type": "gaussian", "sampler_parameters": {"st_dev": -1}},
            r"^p\.sampler_parameters\.st_dev: must be >= 0, got -1\.0$",
        ),
        ({"sampler_type": "beta", "sampler_parameters": {}}, r"^p\.sampler_type: unknown 'beta'"),
        (
            {"sampler_type": "multirange_uniform", "sampler_parameters": {}},
            r"unknown 'multirange_uniform'",
        ),
        ({"sampler_parameters": {}}, r"^p: missing sampler_type$"),
        ({"sampler_type": "uniform"}, r"^p: missing sampler_parameters$"),
        ({**u(), "seed": 3}, r"^p: unknown key 'seed'"),
        (u(min=0), r"^p\.sampler_parameters: unknown key 'min'"),
        (u(seed=1.5), r"^p\.sampler_parameters\.seed: expected an integer"),
        (u(seed=-2), r"^p\.sampler_parameters\.seed: must be >= 0"),
        (
            u(max_value="ten"),
            r"^p\.sampler_parameters\.max_value: expected a finite number, got 'ten'$",
        ),
        (u(max_value=float("inf")), r"^p\.sampler_parameters\.max_value: expected a finite number"),
        (True, r"^p: expected a number or a mapping"),
        ("fast", r"^p: expected a number or a mapping"),
        ([1, 2], r"^p: expected a number or a mapping"),
    ],
)
def test_bad_sampler_is_a_one_line_value_error(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        parse_sampler(raw, "p")
    assert "\n" not in str(error.value)
