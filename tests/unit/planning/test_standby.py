"""The standby lists: empty nodes without MIG or MPS, which the scheduler should open after the nodes in use, graded
by size so that it opens the larger ones later."""

from __future__ import annotations

import dataclasses

from slicewise.catalog import Catalog
from slicewise.cluster.base import GpuNode
from slicewise.forecasting.forecasts import Forecasts
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import FleetPlan, NodeObservation

from .conftest import NOW, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"
T4 = "T4-16GB"
ON = PlannerConfig(max_change_share=1.0, standby=True, shared_reserve=0.0)


def t4(name: str, gpus: int, plugin: str = "default") -> GpuNode:
    return node(name, model=T4, mig_config="all-disabled", plugin=plugin, gpus=gpus)


def plan(catalog: Catalog, observations: list[NodeObservation], config: PlannerConfig = ON) -> FleetPlan:
    load = [s for o in observations if o.pods for s in whole_gpu_load(o.node.name, o.node.gpu_count, 0.9)]
    return plan_fleet(observations, Forecasts(tuple(load), (), "p90", True), catalog, config, NOW)


def test_empty_nodes_are_listed_and_the_larger_ones_twice(catalog: Catalog) -> None:
    # Every empty node gets the first taint (a pod should go to a node in use when one fits); the empty 8-GPU
    # node gets the second too (a pod that starts a node should start a 2-GPU one); the busy 8-GPU node gets
    # neither, however little it holds.
    observations = [
        observe(t4("busy-8", 8), pod("w-1", "busy-8", GPU)),
        observe(t4("empty-8", 8)),
        observe(t4("empty-2a", 2)),
        observe(t4("empty-2b", 2)),
    ]
    result = plan(catalog, observations)
    assert result.standby_grades == (("empty-2a", "empty-2b", "empty-8"), ("empty-8",))
    assert [n for n in result.notes if n.startswith("standby:")] == [
        "standby: 3 empty nodes without MIG or MPS get the taint slicewise.io/standby:PreferNoSchedule (opened only "
        "when no node in use fits; apply mode writes the taints): empty-2a, empty-2b, empty-8; the 1 larger than "
        "the fleet's smallest also slicewise.io/standby-large:PreferNoSchedule: empty-8; the larger, the later "
        "opened"
    ]


def test_a_node_gets_one_grade_per_size_up_to_four_and_busy_nodes_count_among_the_sizes(
    catalog: Catalog,
) -> None:
    # Sizes 1, 2, 4 (busy), 8 and 16 GPUs: the 1-GPU node one taint, the 2-GPU node two, the 8-GPU node four
    # (the busy 4-GPU node holds the third size), and the 16-GPU node four as well: there are four taints.
    observations = [
        observe(t4("busy-4", 4), pod("w-1", "busy-4", GPU)),
        observe(t4("empty-16", 16)),
        observe(t4("empty-8", 8)),
        observe(t4("empty-2", 2)),
        observe(t4("empty-1", 1)),
    ]
    result = plan(catalog, observations)
    assert result.standby_grades == (
        ("empty-1", "empty-16", "empty-2", "empty-8"),
        ("empty-16", "empty-2", "empty-8"),
        ("empty-16", "empty-8"),
        ("empty-16", "empty-8"),
    )
    assert [n for n in result.notes if n.startswith("standby:")] == [
        "standby: 4 empty nodes without MIG or MPS get the taint slicewise.io/standby:PreferNoSchedule (opened only "
        "when no node in use fits; apply mode writes the taints): empty-1, empty-16, empty-2, empty-8; the 3 larger "
        "than the fleet's smallest also slicewise.io/standby-large:PreferNoSchedule: empty-16, empty-2, empty-8; "
        "the 2 larger than the fleet's second smallest also slicewise.io/standby-larger:PreferNoSchedule: "
        "empty-16, empty-8; the 2 larger than the fleet's third smallest also "
        "slicewise.io/standby-largest:PreferNoSchedule: empty-16, empty-8; the larger, the later opened"
    ]


def test_nothing_is_listed_when_switched_off_and_no_node_is_large_in_a_fleet_of_one_size(
    catalog: Catalog,
) -> None:
    observations = [observe(t4("busy-8", 8), pod("w-1", "busy-8", GPU)), observe(t4("empty-8", 8))]
    one_size = plan(catalog, observations)
    assert one_size.standby_grades == (("empty-8",),)
    assert [n for n in one_size.notes if n.startswith("standby:")] == [
        "standby: 1 empty nodes without MIG or MPS get the taint slicewise.io/standby:PreferNoSchedule (opened only "
        "when no node in use fits; apply mode writes the taints): empty-8"
    ]
    mixed = [*observations, observe(t4("empty-2", 2))]
    off = plan(catalog, mixed, dataclasses.replace(ON, standby=False))
    assert off.standby_grades == ()
    assert [n for n in off.notes if n.startswith("standby")] == []
    assert plan(catalog, mixed).standby_grades == (("empty-2", "empty-8"), ("empty-8",))


def test_mig_nodes_and_cordoned_nodes_are_not_listed(catalog: Catalog) -> None:
    # A MIG node's slices serve the fractional pods its layout was made for; a cordoned node is not planned.
    observations = [
        observe(node("a100-1", mig_config="all-1g.10gb", gpus=8)),
        observe(dataclasses.replace(t4("cordoned-8", 8), unschedulable=True)),
        observe(node("a100-2", mig_config="all-disabled", gpus=2)),
        observe(node("a100-3", mig_config="all-disabled", gpus=4)),
    ]
    result = plan(catalog, observations)
    assert result.standby_grades == (("a100-2", "a100-3"), ("a100-3",))


def test_a_node_this_plan_changes_is_not_listed(catalog: Catalog) -> None:
    # Ten 0.4-GPU pods run on whole GPUs: the shared reserve (20 tenants wanted) switches the 2-GPU node and the
    # 8-GPU one to MPS; both are being reconfigured, so neither is listed. Without the reserve both are.
    pods = [dataclasses.replace(pod(f"f-{i}", "busy", GPU), share=0.4) for i in range(10)]
    observations = [observe(t4("busy", 16), *pods), observe(t4("empty-8", 8)), observe(t4("empty-2", 2))]
    with_reserve = plan(catalog, observations, dataclasses.replace(ON, shared_reserve=2.0))
    assert {p.node for p in with_reserve.nodes if p.changes} == {"empty-8", "empty-2"}
    assert with_reserve.standby_grades == ()
    assert plan(catalog, observations).standby_grades[0] == ("empty-2", "empty-8")


def test_an_empty_mps_node_is_left_open(catalog: Catalog) -> None:
    # The shared reserve's tenants wait for fractional pods: tainted, those pods would open whole GPUs first and
    # queue behind whole-GPU pods (docs/backtest.md, "Graded standby").
    mps = catalog.device_plugin_config_for(2)
    observations = [observe(t4("empty-8", 8, mps)), observe(t4("empty-4", 4)), observe(t4("empty-2", 2))]
    result = plan(catalog, observations)
    assert result.standby_grades == (("empty-2", "empty-4"), ("empty-4",))
