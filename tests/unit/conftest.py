"""Fixtures shared by the unit tests of the simulated fleet and the simulated cluster.

A test module may still define its own ``fleet`` fixture (several simulator test modules do, with the same
meaning); pytest then uses the module's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from slicewise.simulator.cluster import SimulatedCluster
from slicewise.simulator.fleet import Fleet
from tests.support.clock import WORKDAY_INSTANT, FakeClock


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    """The shipped demo fleet (``include/config/simulator.yaml``), built once per module."""
    return Fleet.default()


@pytest.fixture
def clock() -> FakeClock:
    """A clock standing at :data:`WORKDAY_INSTANT` until the test moves it."""
    return FakeClock(WORKDAY_INSTANT)


@pytest.fixture
def open_cluster(tmp_path: Path, fleet: Fleet, clock: FakeClock) -> Callable[[float], SimulatedCluster]:
    """``open_cluster(reconfigure_s)``: the simulated cluster of ``fleet`` at ``clock``, whose MIG and
    device-plugin changes take ``reconfigure_s`` seconds; its state file is the test's ``tmp_path / "state.json"``
    (a new one, unless the test has opened it already)."""

    def open_(reconfigure_s: float) -> SimulatedCluster:
        return SimulatedCluster.open(
            tmp_path / "state.json", fleet=fleet, clock=clock, reconfigure_s=reconfigure_s
        )

    return open_
