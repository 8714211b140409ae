"""Where the paid GPU-hours went (``metrics.PaidSplit``): hand-computed splits for a policy and for the bounds,
and on random small traces no part below zero under any policy, with or without the autoscaler."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from slicewise.catalog import load_catalog
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.ideal import IdealReplay
from slicewise.whatif.metrics import PaidSplit, PolicyResult
from slicewise.whatif.policies import POLICIES
from slicewise.whatif.sharing import FormsReplay, SharingReplay
from slicewise.whatif.trace import TraceNode, TracePod

from .test_ideal import FLEETS, TRACES, random_case

CATALOG = load_catalog()
CONFIG = BacktestConfig(eviction_cost_s=0.0)
HOUR = 3600.0


def _split(result: PolicyResult) -> tuple[float, float, float, float]:
    return result.paid.parts()


def _pods() -> tuple[TracePod, ...]:
    # A quarter-GPU pod for an hour and a whole-GPU pod for half an hour, both arriving at 0.
    return (TracePod("quarter", 0.0, HOUR, 1, 0.25, "LS"), TracePod("whole", 0.0, HOUR / 2, 1, 1.0, "LS"))


NODES = [TraceNode("n1", 2, "T4"), TraceNode("n2", 1, "T4")]


def test_static_pays_for_a_whole_gpu_under_a_quarter_pod_a_gpu_freed_on_its_node_and_an_idle_node() -> None:
    # static, first-fit: both pods on n1, each on a whole GPU; n2 idle all hour. Paid: 3 GPUs x 1 h.
    # Requested 0.25 + 0.5 = 0.75 GPU-h; the quarter pod's GPU holds 0.75 beyond it; n1's second GPU is free
    # for the last half hour (0.5); n2 has no pod (1).
    result = Replay(POLICIES["static"], _pods(), NODES, CATALOG, CONFIG, (0.0, HOUR)).run()
    assert result.service_gpu_hours == pytest.approx(3.0)
    assert _split(result) == pytest.approx((0.75, 0.75, 0.5, 1.0))
    assert result.paid.shares() == pytest.approx((0.25, 0.25, 1 / 6, 1 / 3))


def test_ideal_holds_nothing_beyond_the_requests_and_pays_for_its_busy_nodes_only() -> None:
    # ideal: the whole pod and the quarter pod on n1 (2 node-GPUs) for half an hour, then the quarter pod alone,
    # repacked onto n2 (1 node-GPU). Paid 1.5 GPU-h: 0.75 requested, no slack, 0.75 free on the nodes in use.
    result = IdealReplay(_pods(), NODES, CATALOG, CONFIG, (0.0, HOUR)).run()
    assert result.service_gpu_hours == pytest.approx(1.5)
    assert _split(result) == pytest.approx((0.75, 0.0, 0.75, 0.0))


def test_sharing_in_real_forms_pays_for_the_slice_or_tenant_beyond_each_share() -> None:
    # T4: a 0.6-GPU pod holds a whole GPU (0.4 beyond it), a 0.3-GPU pod a third (1/30 beyond it): one GPU each
    # for an hour, on the two 1-GPU nodes, two thirds of the second free.
    pods = (TracePod("big", 0.0, HOUR, 1, 0.6, "LS"), TracePod("small", 0.0, HOUR, 1, 0.3, "LS"))
    nodes = [TraceNode("a", 1, "T4"), TraceNode("b", 1, "T4")]
    forms = FormsReplay(pods, nodes, CATALOG, CONFIG, (0.0, HOUR)).run()
    assert _split(forms) == pytest.approx((0.9, 0.4 + 1 / 30, 2 - 1 - 1 / 3, 0.0), abs=1e-9)
    # sharing pairs them on one GPU with nothing held beyond the shares: 0.1 of it is free.
    shared = SharingReplay(pods, nodes, CATALOG, CONFIG, (0.0, HOUR)).run()
    assert _split(shared) == pytest.approx((0.9, 0.0, 0.1, 0.0), abs=1e-9)


def test_the_shares_of_nothing_paid_are_zero() -> None:
    assert PaidSplit(0.0, 0.0, 0.0, 0.0).shares() == (0.0, 0.0, 0.0, 0.0)


AUTOSCALED = BacktestConfig(eviction_cost_s=0.0, scale_up_s=200.0, scale_down_unneeded_s=600.0)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(TRACES, FLEETS)
def test_no_part_of_the_paid_gpu_hours_is_negative_under_any_policy(
    raw: list[tuple[int, int, float, int]], fleet: tuple[int, int, bool, str]
) -> None:
    nodes, pods = random_case(raw, fleet)
    window = (0.0, 30_000.0)
    for base in (CONFIG, AUTOSCALED):
        config = dataclasses.replace(base, gpu_model=fleet[3] or None)
        results = [
            Replay(POLICIES[name], pods, nodes, CATALOG, config, window).run()
            for name in ("static", "static-mig", "packing")
        ]
        results += [kind(pods, nodes, CATALOG, config, window).run() for kind in (IdealReplay, FormsReplay)]
        for result in results:
            # The parts add up by construction; what can fail is their sign: slots hold at least the requests,
            # the nodes in use at least their slots, and the cluster pays for every node hosting a pod.
            requested, slack, free, no_pods = _split(result)
            assert requested > 0 or result.still_waiting, result.policy  # static-mig may never serve a pod
            assert slack >= -1e-9 and free >= -1e-9 and no_pods >= -1e-9, (result.policy, _split(result))
        assert results[3].paid.slot_slack == pytest.approx(0.0, abs=1e-9)  # ideal holds exactly the shares
