"""The shared reserve: empty nodes switched to MPS ahead of the fractional pods to come, sized by hand here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from slicewise.catalog import Catalog
from slicewise.catalog.resources import WHOLE_GPUS
from slicewise.cluster.base import LAST_CHANGE_ANNOTATION, GpuNode, GpuPod
from slicewise.forecasting.forecasts import DemandForecast, Forecasts
from slicewise.planning import planner
from slicewise.planning.config import PlannerConfig
from slicewise.planning.consolidation import RULE as CONSOLIDATED
from slicewise.planning.planner import plan_fleet
from slicewise.planning.reserve import RULE
from slicewise.planning.types import CHANGE, KEEP, NodePlan

from .conftest import NOW, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"
T4 = "T4-16GB"


def fractional(name: str, node_name: str, share: float) -> GpuPod:
    """A pod that declares its share (the slicewise.io/gpu-share annotation) and holds one nvidia.com/gpu."""
    return dataclasses.replace(pod(name, node_name, GPU), share=share)


def plan(
    catalog: Catalog,
    busy: tuple[GpuNode, list[GpuPod]],
    empty: list[GpuNode],
    config: PlannerConfig | None = None,
    whole_waiting: float = 0.0,
) -> dict[str, NodePlan]:
    """Plans by node: ``busy`` holds the running pods, ``empty`` none; ``whole_waiting`` 2-GPU pods waited most of
    the last hour."""
    busy_node, pods = busy
    demand = (DemandForecast(WHOLE_GPUS, whole_waiting, whole_waiting, gpus=2),) if whole_waiting else ()
    forecasts = Forecasts(
        tuple(whole_gpu_load(busy_node.name, busy_node.gpu_count, 0.4)), demand, "p90", True
    )
    observations = [observe(busy_node, *pods), *(observe(n) for n in empty)]
    result = plan_fleet(observations, forecasts, catalog, config or PlannerConfig(max_change_share=1.0), NOW)
    return {p.node: p for p in result.nodes}


def t4(name: str, gpus: int, plugin: str = "default") -> GpuNode:
    return node(name, model=T4, mig_config="all-disabled", plugin=plugin, gpus=gpus)


def test_the_smallest_empty_node_joins_the_reserve_and_nothing_is_evicted(catalog: Catalog) -> None:
    # Two 0.4-GPU pods run on whole GPUs of busy (4 GPUs, two held by whole-GPU pods). Reserve: 2 x 2 = 4
    # tenants; none yet. small (2 GPUs, 4 tenants) is switched; large (8 GPUs) stays whole.
    pods = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.4), pod("w-1", "busy", GPU, 2)]
    plans = plan(catalog, (t4("busy", 4), pods), [t4("large", 8), t4("small", 2)])
    switched = plans["small"]
    assert switched.action == CHANGE and switched.rule == RULE
    assert switched.desired.device_plugin_config == catalog.device_plugin_config_for(2)
    assert switched.desired.mig_config == switched.current.mig_config
    assert switched.disruption == ()
    # Both pods would fill a tenant rather than a whole GPU: each leaves half a GPU to others.
    assert switched.gain_gpu_hours == pytest.approx(2 * 0.5)
    assert plans["large"].action == KEEP and plans["busy"].action == KEEP


def test_a_large_node_stays_whole_when_fewer_tenants_are_missing_than_it_brings(catalog: Catalog) -> None:
    # Three small pods: 6 tenants wanted. small brings 4; the 2 missing need one GPU, and middle has 4 (more than
    # they need, and more than SMALL_NODE_GPUS), so the reserve stops short rather than take it.
    pods = [fractional(f"p-{i}", "busy", 0.3) for i in range(3)]
    plans = plan(catalog, (t4("busy", 4), pods), [t4("middle", 4), t4("small", 2)])
    assert plans["small"].rule == RULE
    assert plans["middle"].action == KEEP
    # Six: 12 wanted, 8 missing after small: middle's 4 GPUs (8 tenants) are needed.
    pods = [fractional(f"p-{i}", "busy", 0.3) for i in range(6)]
    plans = plan(catalog, (t4("busy", 8), pods), [t4("middle", 4), t4("small", 2)])
    assert plans["middle"].rule == RULE and plans["small"].rule == RULE


def test_existing_mps_tenants_count_and_larger_pods_do_not(catalog: Catalog) -> None:
    # The busy node is already MPS with 2 tenants per GPU (8): two small pods want 4. No change.
    mps = catalog.device_plugin_config_for(2)
    pods = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.45)]
    plans = plan(catalog, (t4("busy", 4, mps), pods), [t4("small", 2)])
    assert plans["small"].action == KEEP
    # Pods of more than half a GPU fit no reserve tenant, and plain nvidia.com/gpu pods say no share: no reserve.
    pods = [fractional("a-1", "busy", 0.6), pod("b-1", "busy", GPU)]
    assert plan(catalog, (t4("busy", 4), pods), [t4("small", 2)])["small"].action == KEEP


def test_no_reserve_while_whole_gpu_pods_wait_or_when_switched_off(catalog: Catalog) -> None:
    pods = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.4)]
    waiting = plan(catalog, (t4("busy", 4), pods), [t4("small", 2)], whole_waiting=1.0)
    assert all(p.rule != RULE for p in waiting.values())
    off = PlannerConfig(max_change_share=1.0, shared_reserve=0.0)
    assert plan(catalog, (t4("busy", 4), pods), [t4("small", 2)], off)["small"].action == KEEP


def test_a_node_changed_within_its_dwell_time_does_not_join(catalog: Catalog) -> None:
    recent = dataclasses.replace(
        t4("small", 2), annotations={LAST_CHANGE_ANNOTATION: "2026-11-29T11:30:00+00:00"}
    )
    pods = [fractional("a-1", "busy", 0.4)]
    assert plan(catalog, (t4("busy", 4), pods), [recent])["small"].action == KEEP


def test_no_reserve_in_a_run_that_consolidates_a_node(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pods a consolidation moves go to the room other nodes keep, empty ones among them: that run leaves the
    # empty nodes as they are.
    def consolidated(planned: Any, *_: Any) -> dict[str, NodePlan]:
        busy = next(item.plan for item in planned if item.ctx.name == "busy")
        return {"busy": dataclasses.replace(busy, action=CHANGE, rule=CONSOLIDATED)}

    pods = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.4)]
    assert plan(catalog, (t4("busy", 4), pods), [t4("small", 2)])["small"].rule == RULE
    monkeypatch.setattr(planner, "consolidate", consolidated)
    plans = plan(catalog, (t4("busy", 4), pods), [t4("small", 2)])
    assert plans["busy"].rule == CONSOLIDATED and plans["small"].action == KEEP


def test_at_most_half_the_gpus_of_a_model_join_so_pods_pinned_to_it_keep_whole_ones(catalog: Catalog) -> None:
    # The 1-GPU V100 node is the smallest, but the fleet's only V100: a pod pinned to V100s that needs a whole GPU
    # would have none left. The T4 joins instead.
    v100 = node("v100", model="V100-16GB", mig_config="all-disabled", gpus=1)
    pods = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.4)]
    plans = plan(catalog, (t4("busy", 4), pods), [v100, t4("small", 2)])
    assert plans["v100"].action == KEEP and plans["small"].rule == RULE


def test_a_node_label_that_pods_pin_on_counts_as_a_kind_of_node_too(catalog: Catalog) -> None:
    # A whole-GPU pod pins itself to nodes labelled pool=x by its node selector (it runs on busy, which lost the
    # label since); the 1-GPU T4 "only-x" is the one node left with it. Without pins it would join first (the
    # smallest); with the pin it is all its kind's GPUs, and the reserve takes at most half of a kind.
    pool = "example.com/pool"
    only_x = dataclasses.replace(t4("only-x", 1), labels={pool: "x"})
    busy = t4("busy", 4)
    pinned = dataclasses.replace(pod("w-1", "busy", GPU), node_selector={pool: ("x",)})
    pods = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.4), pinned]
    plans = plan(catalog, (busy, pods), [only_x, t4("small", 2)])
    assert plans["only-x"].action == KEEP and plans["small"].rule == RULE
    # The same fleet with no pod pinning on the label: the 1-GPU node joins, as the smallest. A pin to a node's
    # own name does not make every node a kind of its own (which would keep them all out).
    unpinned = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.4), pod("w-1", "busy", GPU)]
    assert plan(catalog, (busy, unpinned), [only_x, t4("small", 2)])["only-x"].rule == RULE
    hostname = "kubernetes.io/hostname"

    def named(gpu_node: GpuNode) -> GpuNode:  # as the kubelet labels every node
        return dataclasses.replace(gpu_node, labels={**gpu_node.labels, hostname: gpu_node.name})

    by_name = dataclasses.replace(pod("w-1", "busy", GPU), node_selector={hostname: ("busy",)})
    pods = [fractional("a-1", "busy", 0.4), fractional("b-1", "busy", 0.4), by_name]
    plans = plan(catalog, (named(busy), pods), [named(only_x), named(t4("small", 2))])
    assert plans["only-x"].rule == RULE


def test_fractional_pods_that_may_not_be_evicted_get_one_tenant_each_while_whole_gpu_pods_run(
    catalog: Catalog,
) -> None:
    # Four 0.4-GPU pods and a whole-GPU pod on busy; two empty 2-GPU nodes (4 tenants each). Every pod may be
    # evicted: 2 x 4 = 8 tenants wanted, both nodes join.
    small = [fractional(f"p-{i}", "busy", 0.4) for i in range(4)]
    whole = pod("w-1", "busy", GPU)
    empty = [t4("s1", 2), t4("s2", 2)]
    plans = plan(catalog, (t4("busy", 8), [*small, whole]), empty)
    assert plans["s1"].rule == RULE and plans["s2"].rule == RULE
    # One of them may not be evicted: a reserve node it lands on goes back to whole GPUs only once it ends, so
    # the reserve is one tenant per pod (4): s1 alone, and the plan says why.
    stuck = [dataclasses.replace(small[0], evictable=False), *small[1:]]
    plans = plan(catalog, (t4("busy", 8), [*stuck, whole]), empty)
    assert plans["s1"].rule == RULE and plans["s2"].action == KEEP
    assert any("one per pod, not planner_shared_reserve's" in reason for reason in plans["s1"].reasons)
    # No whole-GPU pod runs or waits: nothing to give a reserve node back to, so twice as many again. A pod that
    # declares no share counts as a whole-GPU pod on a node of whole GPUs, not on an MPS node, where it holds a
    # tenant (the MPS node's 2 tenants count too: 2 x 4 = 8 wanted, s1 and s2 bring 8 more).
    plans = plan(catalog, (t4("busy", 8), stuck), empty)
    assert plans["s1"].rule == RULE and plans["s2"].rule == RULE
    tenant = observe(t4("m", 1, catalog.device_plugin_config_for(2)), pod("t-1", "m", GPU))
    forecasts = Forecasts(tuple(whole_gpu_load("busy", 8, 0.4)), (), "p90", True)
    observations = [observe(t4("busy", 8), *stuck), tenant, *(observe(n) for n in empty)]
    config = PlannerConfig(max_change_share=1.0)
    plans = {p.node: p for p in plan_fleet(observations, forecasts, catalog, config, NOW).nodes}
    assert plans["s1"].rule == RULE and plans["s2"].rule == RULE
    observations[1] = observe(t4("m", 1), pod("t-1", "m", GPU))
    plans = {p.node: p for p in plan_fleet(observations, forecasts, catalog, config, NOW).nodes}
    assert plans["s1"].rule == RULE and plans["s2"].action == KEEP
