"""What the bounds pay for under the replays' autoscaler (``whatif.held``): the node-GPUs held over the unneeded
time. Hand-computed figures, and the bound against every policy replayed with the same autoscaler."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from slicewise.catalog import load_catalog
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.held import HeldCapacity
from slicewise.whatif.ideal import IdealReplay
from slicewise.whatif.policies import POLICIES
from slicewise.whatif.sharing import SharingReplay
from slicewise.whatif.trace import TraceNode, TracePod

from .test_ideal import FLEETS, TRACES, random_case

CATALOG = load_catalog()
# Empty nodes only (no utilisation threshold): a node is paid for until it has been empty for 600 s.
AUTOSCALED = BacktestConfig(
    eviction_cost_s=0.0, scale_up_s=200.0, scale_down_unneeded_s=600.0, scale_down_utilization_threshold=0.0
)


def _paid(held: HeldCapacity, changes: list[tuple[float, int]], until: float) -> float:
    """Integrate ``held`` over [0, until) with the level changes given, stopping where it falls."""
    total, last = 0.0, 0.0
    for at, level in [*changes, (until, None)]:
        for change in held.falls_before(at):  # as IdealReplay._advance meters it
            total += held.held * (change - last)
            last = change
        total += held.held * (at - last)
        last = at
        if level is not None:
            held.set(at, level)
    return total


def test_the_highest_level_of_the_window_is_paid_until_it_leaves_the_window() -> None:
    # Start fleet of 8 paid until 100. Levels: 0 from 0, 5 at 50, 2 at 120, 3 at 150, 0 at 400.
    # Paid: 8 on [0, 100); 5 on [100, 220) (5 left at 120, held 100 more); 3 on [220, 500); 0 after.
    held = HeldCapacity(100.0, 0.0, 8)
    paid = _paid(held, [(50.0, 5), (120.0, 2), (150.0, 3), (400.0, 0)], until=600.0)
    assert paid == pytest.approx(8 * 100 + 5 * 120 + 3 * 280)


def test_a_level_that_returns_within_the_window_is_paid_as_if_it_never_left() -> None:
    held = HeldCapacity(100.0, 0.0, 0)
    paid = _paid(held, [(0.0, 4), (200.0, 0), (250.0, 4), (300.0, 0)], until=1000.0)
    assert paid == pytest.approx(4 * 400)  # 4 from 0 to 400: the gap at 200-250 is inside the hold


def test_levels_that_last_no_time_are_not_paid() -> None:
    # At 100 the level goes 2 -> 9 -> 1 in one instant (pods arriving together, repacked): 9 never ran.
    held = HeldCapacity(50.0, 0.0, 0)
    paid = _paid(held, [(0.0, 2), (100.0, 9), (100.0, 1)], until=300.0)
    assert paid == pytest.approx(2 * 150 + 1 * 150)  # 2 until 150 (held 50 after 100), then 1


def _one_pod(config: BacktestConfig) -> tuple[float, float]:
    pods = (TracePod("a", 1000.0, 500.0, 1, 1.0, "LS"),)
    nodes = [TraceNode("n1", 1, "T4")]
    bound = IdealReplay(pods, nodes, CATALOG, config, (0.0, 5000.0)).run()
    static = Replay(POLICIES["static"], pods, nodes, CATALOG, config, (0.0, 5000.0)).run()
    return bound.service_gpu_hours * 3600, static.service_gpu_hours * 3600


def test_ideal_pays_for_its_node_until_the_autoscaler_could_remove_it() -> None:
    # The start fleet (one GPU) is paid until 600; a runs 1000-1500 and its node is paid until 2100: 1,700 s.
    # static's autoscaler removed n1 at 600 and adds it back for a at 1000 (a starts at 1200, leaves at 1700,
    # n1 removed at 2300): 600 + 1,300 s.
    bound, static = _one_pod(AUTOSCALED)
    assert (bound, static) == (pytest.approx(1700.0), pytest.approx(1900.0))
    # Without the replays' autoscaler the bound pays for its busy node only.
    assert _one_pod(dataclasses.replace(AUTOSCALED, scale_down_unneeded_s=None))[0] == pytest.approx(500.0)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(TRACES, FLEETS)
def test_the_bound_pays_no_more_than_a_policy_that_made_no_pod_wait_under_the_same_autoscaler(
    raw: list[tuple[int, int, float, int]], fleet: tuple[int, int, bool, str]
) -> None:
    nodes, pods = random_case(raw, fleet)
    config = dataclasses.replace(AUTOSCALED, gpu_model=fleet[3] or None)
    window = (0.0, 30_000.0)
    bound = IdealReplay(pods, nodes, CATALOG, config, window).run()
    shared = SharingReplay(pods, nodes, CATALOG, config, window).run()
    for name in ("static", "static-mig", "reactive", "packing", "oracle"):
        result = Replay(POLICIES[name], pods, nodes, CATALOG, config, window).run()
        if result.still_waiting == 0 and result.wait_mean_s == 0 and not result.pods_evicted:
            assert bound.service_gpu_hours <= result.service_gpu_hours + 1e-9, name
    if shared.wait_mean_s == 0:
        assert bound.service_gpu_hours <= shared.service_gpu_hours + 1e-9
