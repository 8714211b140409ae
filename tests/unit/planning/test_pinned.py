"""Pinned nodes: the few nodes some pods may only run on, kept for them (planning.pinned); every figure by hand."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from slicewise.catalog import Catalog
from slicewise.cluster.base import GPU_PRODUCT_LABEL, GpuNode, GpuPod, sharing_labels
from slicewise.forecasting.forecasts import DemandForecast, Forecasts
from slicewise.planning.config import PlannerConfig, PlannerConfigError
from slicewise.planning.pinned import pinned
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import FleetPlan, NodeObservation, Pin

from .conftest import NOW, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"
POOL = "example.com/pool"
OLD = (POOL, ("old",))
P100 = ((POOL, ("p100",)),)
CONFIG = PlannerConfig(max_change_share=1.0, shared_reserve=0.0, pinned_share=0.25)


def pooled(name: str, gpus: int, pool: str) -> GpuNode:
    return dataclasses.replace(
        node(name, model="T4-16GB", mig_config="all-disabled", gpus=gpus), labels={POOL: pool}
    )


def pinned_pod(name: str, node_name: str) -> GpuPod:
    return dataclasses.replace(pod(name, node_name, GPU), node_selector={POOL: ("p100",)})


def fleet(evictable: bool = False) -> list[NodeObservation]:
    """20 GPUs: two 2-GPU nodes of pool p100 (one runs a pod pinned there), two 8-GPU nodes of pool t4 (one runs
    a pod that may run anywhere and may not be evicted, unless ``evictable``)."""
    return [
        observe(pooled("p100-a", 2, "p100"), pinned_pod("pinned-1", "p100-a")),
        observe(pooled("p100-b", 2, "p100")),
        observe(pooled("t4-a", 8, "t4")),
        observe(pooled("t4-b", 8, "t4"), pod("anywhere-1", "t4-b", GPU, evictable=evictable)),
    ]


def plan(catalog: Catalog, observations: list[NodeObservation], config: PlannerConfig = CONFIG) -> FleetPlan:
    load = [s for o in observations if o.pods for s in whole_gpu_load(o.node.name, o.node.gpu_count, 0.9)]
    return plan_fleet(observations, Forecasts(tuple(load), (), "p90", True), catalog, config, NOW)


def test_the_nodes_of_a_scarce_pin_are_kept_with_a_taint_more_than_the_largest_size_in_use_or_not(
    catalog: Catalog,
) -> None:
    # The p100 nodes hold 4 of 20 GPUs, at most a quarter: kept. Sizes 2 and 8: the empty 8-GPU node gets two
    # standby taints, both p100 nodes three (one more than the largest size), the one in use too, so a pod that
    # may run anywhere opens the 8-GPU node before either; a pod pinned to p100 has no other node.
    result = plan(catalog, fleet())
    assert result.pins == (Pin(P100, NOW),)
    assert result.scarce_pins == result.pins
    assert result.pinned_nodes == ("p100-a", "p100-b")
    assert result.standby_grades == (
        ("p100-a", "p100-b", "t4-a"),
        ("p100-a", "p100-b", "t4-a"),
        ("p100-a", "p100-b"),
    )
    assert next(n for n in result.notes if n.startswith("standby:")).startswith(
        "standby: 3 nodes without MIG or MPS (the empty ones and those kept for pinned pods) get the taint"
    )
    assert [n for n in result.notes if n.startswith("kept for pinned pods")] == [
        "kept for pinned pods: 2 nodes that only pods pinned to example.com/pool in p100 (last seen 2026-11-29 "
        "12:00) may use among few others; those without MIG or MPS carry one standby taint more than the largest "
        "size, in use or not, and cluster-autoscaler's priority expander should rank their node groups below the "
        "others: p100-a, p100-b"
    ]
    # Without it the small empty node is the one opened first (one taint against the 8-GPU node's two), and the
    # p100 node in use takes any pod that fits.
    off = plan(catalog, fleet(), dataclasses.replace(CONFIG, pinned_share=0.0))
    assert off.standby_grades == (("p100-b", "t4-a"), ("t4-a",))
    assert (off.pins, off.scarce_pins, off.scarce_kinds, off.pinned_nodes) == ((Pin(P100, NOW),), (), (), ())


def test_the_nodes_of_every_scarce_kind_on_a_pinned_label_are_kept_too_pinned_yet_or_not(
    catalog: Catalog,
) -> None:
    # A v100 pool (2 of 22 GPUs, at most an eighth) no pod has pinned itself to yet: a pod that pins itself there
    # later has only that node, so it is kept like the p100 nodes (4 of 22: at most a quarter, the pin's share,
    # but more than an eighth, the kinds' share). A label no pin names (the rack) defines no kind.
    observations = fleet()
    v100 = dataclasses.replace(pooled("v100-a", 2, "v100"), labels={POOL: "v100", "example.com/rack": "r1"})
    config = dataclasses.replace(CONFIG, scarce_kind_share=0.125)
    result = plan(catalog, [*observations, observe(v100)], config)
    assert (result.scarce_pins, result.scarce_kinds) == ((Pin(P100, NOW),), ((POOL, "v100"),))
    assert result.pinned_nodes == ("p100-a", "p100-b", "v100-a")
    assert result.standby_grades == (
        ("p100-a", "p100-b", "t4-a", "v100-a"),
        ("p100-a", "p100-b", "t4-a", "v100-a"),
        ("p100-a", "p100-b", "v100-a"),
    )
    assert [n for n in result.notes if n.startswith("kept for pinned pods")] == [
        "kept for pinned pods: 3 nodes that only pods pinned to example.com/pool in p100 (last seen 2026-11-29 "
        "12:00) may use among few others, or that are of a kind on a label pods pin themselves to that holds at "
        "most 12.5% of the GPUs (example.com/pool=v100); those without MIG or MPS carry one standby taint more "
        "than the largest size, in use or not, and cluster-autoscaler's priority expander should rank their node "
        "groups below the others: p100-a, p100-b, v100-a"
    ]
    # No pin seen, no kind: nothing is kept (a fleet that pins nothing is left to the scheduler and least-waste).
    unpinned = [observe(pooled("p100-b", 2, "p100")), *observations[2:], observe(v100)]
    assert (plan(catalog, unpinned, config).scarce_kinds, plan(catalog, unpinned, config).pinned_nodes) == (
        (),
        (),
    )


def test_a_gpu_product_shared_by_mps_counts_as_its_model_not_as_a_kind_of_its_own(catalog: Catalog) -> None:
    # Pods pin themselves to the GPU product. Of the 20 GPUs, the T4s are 10 (8 whole, 2 shared by MPS, whose
    # product GPU feature discovery writes with -SHARED): one kind of 10 GPUs, more than an eighth, not a kind of 8
    # and a scarce one of 2. The P100 node (2 GPUs) runs a pod pinned to its product and is the one kind kept.
    t4_whole = sharing_labels("Tesla-T4", 1)
    t4_shared = sharing_labels("Tesla-T4", 2)
    pinned_p100 = dataclasses.replace(
        pod("pinned-1", "p100-a", GPU), node_selector={GPU_PRODUCT_LABEL: ("Tesla-P100-PCIE-16GB",)}
    )
    observations = [
        observe(
            dataclasses.replace(
                node("p100-a", model="T4-16GB", mig_config="all-disabled", gpus=2),
                labels=sharing_labels("Tesla-P100-PCIE-16GB", 1),
            ),
            pinned_p100,
        ),
        observe(
            dataclasses.replace(
                node("t4-a", model="T4-16GB", mig_config="all-disabled", gpus=8), labels=t4_whole
            ),
            pod("anywhere-1", "t4-a", GPU, evictable=False),
        ),
        observe(
            dataclasses.replace(
                node("t4-b", model="T4-16GB", mig_config="all-disabled", gpus=2), labels=t4_shared
            )
        ),
        observe(pooled("other-a", 8, "other")),
    ]
    result = plan(catalog, observations, dataclasses.replace(CONFIG, scarce_kind_share=0.125))
    assert result.scarce_kinds == ((GPU_PRODUCT_LABEL, "Tesla-P100-PCIE-16GB"),)
    assert result.pinned_nodes == ("p100-a",)


def test_a_pin_whose_nodes_hold_more_than_the_share_keeps_nothing(catalog: Catalog) -> None:
    # 4 of 20 GPUs is more than a tenth: remembered, not kept.
    result = plan(catalog, fleet(), dataclasses.replace(CONFIG, pinned_share=0.1))
    assert (result.pins, result.scarce_pins, result.pinned_nodes) == ((Pin(P100, NOW),), (), ())
    assert result.scarce_kinds == ()
    assert result.standby_grades == (("p100-b", "t4-a"), ("t4-a",))


def test_a_pin_is_remembered_for_the_memory_hours_and_a_pending_request_refreshes_it() -> None:
    # Seen 100 h ago (kept, still dated then), 200 h ago (forgotten after 168 h); the p100 pin is seen now on a
    # pending request, refreshing the 100-hour-old sighting of the same selector.
    remembered = (
        Pin(P100, NOW - timedelta(hours=100)),
        Pin((OLD,), NOW - timedelta(hours=200)),
        Pin(((POOL, ("t4",)),), NOW - timedelta(hours=100)),
    )
    pending = DemandForecast(GPU, 1.0, 1.0, gpus=1, node_selector=P100)
    observations = [observe(pooled("t4-a", 8, "t4"))]
    result = pinned(observations, Forecasts((), (pending,), "p90", True), remembered, NOW, 168.0, 0.25)
    assert result.pins == (Pin(P100, NOW), Pin(((POOL, ("t4",)),), NOW - timedelta(hours=100)))
    # No p100 node in service: all its pods have is the autoscaler's p100 group, so it is scarce; the t4 pin's
    # nodes hold every GPU.
    assert (result.scarce, result.nodes) == ((Pin(P100, NOW),), ())


def test_nothing_is_kept_where_every_pod_may_be_evicted_unless_nothing_consolidates(catalog: Catalog) -> None:
    # Every pod opted in: a consolidation can take a p100 node back for a pinned pod that waits, so the plan keeps
    # nothing (it still remembers the pin). With planner_consolidation=off nothing would take it back: kept.
    result = plan(catalog, fleet(evictable=True))
    assert (result.pins, result.scarce_pins, result.pinned_nodes) == ((Pin(P100, NOW),), (), ())
    off = plan(catalog, fleet(evictable=True), dataclasses.replace(CONFIG, consolidation="off"))
    assert off.pinned_nodes == ("p100-a", "p100-b")


def test_a_pending_pin_with_no_node_in_service_still_asks_for_its_groups_to_be_ranked_last(
    catalog: Catalog,
) -> None:
    # A request pinned to p100 waits and no p100 node is in service: its pods have only the autoscaler's p100
    # groups, so the note still asks for them to be ranked last, with no node to name.
    observations = fleet()[2:]
    pending = DemandForecast(GPU, 1.0, 1.0, gpus=1, node_selector=P100)
    load = whole_gpu_load("t4-b", 8, 0.9)
    result = plan_fleet(observations, Forecasts(tuple(load), (pending,), "p90", True), catalog, CONFIG, NOW)
    assert (result.scarce_pins, result.pinned_nodes) == ((Pin(P100, NOW),), ())
    assert [n for n in result.notes if n.startswith("kept for pinned pods")] == [
        "kept for pinned pods: 0 nodes that only pods pinned to example.com/pool in p100 (last seen 2026-11-29 "
        "12:00) may use among few others; those without MIG or MPS carry one standby taint more than the largest "
        "size, in use or not, and cluster-autoscaler's priority expander should rank their node groups below the "
        "others"
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("pinned_share", 1.5, "planner_pinned_share must be in"),
        ("pinned_memory_hours", -1.0, "planner_pinned_memory_hours cannot be negative"),
        ("scarce_kind_share", -0.1, "planner_scarce_kind_share must be in"),
    ],
)
def test_pinned_settings_out_of_range_fail_with_their_name(field: str, value: float, message: str) -> None:
    with pytest.raises(PlannerConfigError, match=message):
        dataclasses.replace(CONFIG, **{field: value})
