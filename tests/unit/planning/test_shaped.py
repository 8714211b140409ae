"""The nodes kept from cluster-autoscaler's scale-down (``planner_keep_shaped``): the nodes with a MIG layout that
host pods, which the autoscaler would read as unused (MIG-only nodes advertise no ``nvidia.com/gpu``) and drain.
Nodes shared by MPS are left to it, which counts their tenants, unless their pods take more than
``planner_mps_release_below`` of them."""

from __future__ import annotations

import dataclasses

from slicewise.catalog import Catalog
from slicewise.forecasting.forecasts import Forecasts
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import FleetPlan, NodeObservation

from .conftest import NOW, mig_load, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"
# Nothing changes (every proposal over the hourly budget is blocked): the lists depend on the nodes as they are.
STILL = PlannerConfig(max_change_share=0.0, shared_reserve=0.0, standby=False)


def plan(catalog: Catalog, observations: list[NodeObservation], config: PlannerConfig = STILL) -> FleetPlan:
    load = []
    for o in observations:
        if o.node.mig_config != "all-disabled":
            load += mig_load(o.node, 0.9, catalog)
        elif o.pods:
            load += whole_gpu_load(o.node.name, o.node.gpu_count, 0.9)
    return plan_fleet(observations, Forecasts(tuple(load), (), "p90", True), catalog, config, NOW)


def test_nodes_with_mig_that_host_pods_are_listed_and_no_others(catalog: Catalog) -> None:
    mps = catalog.device_plugin_config_for(2)
    observations = [
        observe(node("mps-busy", "T4-16GB", "all-disabled", mps, 2), pod("a-1", "mps-busy", GPU)),
        observe(node("mig-busy"), pod("b-1", "mig-busy", "nvidia.com/mig-1g.10gb")),
        observe(node("whole-busy", "T4-16GB", "all-disabled", gpus=2), pod("c-1", "whole-busy", GPU)),
        observe(node("mps-empty", "T4-16GB", "all-disabled", mps, 2)),
    ]
    result = plan(catalog, observations)
    # mps-busy is left to the autoscaler, which counts its tenants: one of four taken reads 0.25, not more than
    # planner_mps_release_below.
    assert result.scale_down_disabled == ("mig-busy",)
    assert [n for n in result.notes if n.startswith("kept from the autoscaler")] == [
        "kept from the autoscaler (nodes with MIG that host pods, and nodes shared by MPS with more than 25% of "
        "their tenants taken, marked cluster-autoscaler.kubernetes.io/scale-down-disabled): mig-busy"
    ]
    off = plan(catalog, observations, dataclasses.replace(STILL, keep_shaped=False))
    assert off.scale_down_disabled == ()
    assert not [n for n in off.notes if n.startswith("kept from the autoscaler")]


def test_mps_nodes_above_planner_mps_release_below_are_listed_too(catalog: Catalog) -> None:
    # Three T4 nodes of two GPUs under MPS, two tenants per GPU (four in all), with one, two and four tenants
    # taken: 0.25, 0.5 and 1 as the autoscaler reads them. A node at exactly the setting is left to it.
    mps = catalog.device_plugin_config_for(2)

    def shared(name: str, taken: int) -> NodeObservation:
        pods = [pod(f"{name}-{k}", name, GPU) for k in range(taken)]
        return observe(node(name, "T4-16GB", "all-disabled", mps, 2), *pods)

    observations = [
        shared("mps-quarter", 1),
        shared("mps-half", 2),
        shared("mps-full", 4),
        observe(node("mig-busy"), pod("b-1", "mig-busy", "nvidia.com/mig-1g.10gb")),
    ]
    listed = {
        below: plan(catalog, observations, dataclasses.replace(STILL, mps_release_below=below))
        for below in (1.0, 0.5, 0.25, 0.0)
    }
    assert {below: result.scale_down_disabled for below, result in listed.items()} == {
        1.0: ("mig-busy",),
        0.5: ("mig-busy", "mps-full"),
        0.25: ("mig-busy", "mps-full", "mps-half"),
        0.0: ("mig-busy", "mps-full", "mps-half", "mps-quarter"),
    }
    assert [n for n in listed[0.25].notes if n.startswith("kept from the autoscaler")] == [
        "kept from the autoscaler (nodes with MIG that host pods, and nodes shared by MPS with more than 25% of "
        "their tenants taken, marked cluster-autoscaler.kubernetes.io/scale-down-disabled): mig-busy, mps-full, "
        "mps-half"
    ]
    assert [n for n in listed[1.0].notes if n.startswith("kept from the autoscaler")] == [
        "kept from the autoscaler (nodes with MIG that host pods, marked "
        "cluster-autoscaler.kubernetes.io/scale-down-disabled): mig-busy"
    ]
