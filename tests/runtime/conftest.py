"""One local Ray cluster of 2 CPUs for the Ray tests (it takes seconds to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

RAY_GROUP = pytest.mark.xdist_group("ray")
"""Tests on the shared cluster run in one worker of pytest-xdist, so one cluster serves them."""


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test that uses the cluster in the Ray group."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(RAY_GROUP)


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[None]:
    """Ray, started once on 2 CPUs; the code under test joins it and leaves it running."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        yield
    finally:
        ray.shutdown()
