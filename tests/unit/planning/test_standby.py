"""The standby list: empty nodes larger than the fleet's smallest, which the scheduler should open last."""

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


def test_empty_nodes_larger_than_the_smallest_are_listed(catalog: Catalog) -> None:
    # Two empty 2-GPU nodes stay open (a pod that starts a node should start one of them); the empty 8-GPU
    # node is listed; the busy 8-GPU node is not, however little it holds.
    observations = [
        observe(t4("busy-8", 8), pod("w-1", "busy-8", GPU)),
        observe(t4("empty-8", 8)),
        observe(t4("empty-2a", 2)),
        observe(t4("empty-2b", 2)),
    ]
    result = plan(catalog, observations)
    assert result.standby == ("empty-8",)
    assert [n for n in result.notes if n.startswith("standby:")] == [
        "standby: 1 empty nodes larger than the fleet's smallest get the taint slicewise.io/standby:"
        "PreferNoSchedule (opened only when no other node fits; apply mode writes it): empty-8"
    ]


def test_nothing_is_listed_when_switched_off_or_in_a_fleet_of_one_size(catalog: Catalog) -> None:
    observations = [observe(t4("busy-8", 8), pod("w-1", "busy-8", GPU)), observe(t4("empty-8", 8))]
    assert plan(catalog, observations).standby == ()
    mixed = [*observations, observe(t4("empty-2", 2))]
    assert plan(catalog, mixed, dataclasses.replace(ON, standby=False)).standby == ()
    assert plan(catalog, mixed).standby == ("empty-8",)


def test_mig_nodes_and_cordoned_nodes_are_not_listed(catalog: Catalog) -> None:
    # A MIG node's slices serve the fractional pods its layout was made for; a cordoned node is not planned.
    observations = [
        observe(node("a100-1", mig_config="all-1g.10gb", gpus=8)),
        observe(dataclasses.replace(t4("cordoned-8", 8), unschedulable=True)),
        observe(node("a100-2", mig_config="all-disabled", gpus=2)),
        observe(node("a100-3", mig_config="all-disabled", gpus=4)),
    ]
    assert plan(catalog, observations).standby == ("a100-3",)


def test_a_node_this_plan_changes_is_not_listed(catalog: Catalog) -> None:
    # Ten 0.4-GPU pods run on whole GPUs: the shared reserve (20 tenants wanted) switches the 2-GPU node and the
    # 8-GPU one to MPS; both are being reconfigured, so neither is listed. Without the reserve the 8-GPU node is.
    pods = [dataclasses.replace(pod(f"f-{i}", "busy", GPU), share=0.4) for i in range(10)]
    observations = [observe(t4("busy", 16), *pods), observe(t4("empty-8", 8)), observe(t4("empty-2", 2))]
    with_reserve = plan(catalog, observations, dataclasses.replace(ON, shared_reserve=2.0))
    assert {p.node for p in with_reserve.nodes if p.changes} == {"empty-8", "empty-2"}
    assert with_reserve.standby == ()
    assert plan(catalog, observations).standby == ("empty-8",)


def test_an_empty_mps_node_is_listed_too(catalog: Catalog) -> None:
    # A fractional pod takes a free GPU on a node in use before it opens an empty 8-GPU node of tenants.
    mps = catalog.device_plugin_config_for(2)
    observations = [observe(t4("empty-8", 8, mps)), observe(t4("empty-2", 2))]
    assert plan(catalog, observations).standby == ("empty-8",)
