"""Consolidation: a node is emptied when its pods fit elsewhere and, empty, it hosts what waits for whole GPUs."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from slicewise.catalog import Catalog
from slicewise.catalog.resources import WHOLE_GPUS
from slicewise.cluster.base import GpuNode, GpuPod
from slicewise.forecasting.forecasts import DemandForecast, Forecasts
from slicewise.planning.config import PlannerConfig
from slicewise.planning.consolidation import RULE
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import CHANGE, KEEP, FleetPlan

from .conftest import NOW, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"


def _plan(
    catalog: Catalog,
    config: PlannerConfig,
    *,
    evictable: bool = True,
    median: float = 1.0,
    latest: float | None = None,
) -> FleetPlan:
    """Two 2-GPU H100 nodes without MIG, one single-GPU pod on each; a pod asking for 2 GPUs waits (P90 one
    pod; ``median`` how many waited most of the last hour, ``latest`` how many wait now)."""
    nodes = [node(n, model="H100-80GB", mig_config="all-disabled", gpus=2) for n in ("h1", "h2")]
    pods = [pod("svc-1", "h1", GPU, evictable=evictable), pod("svc-2", "h2", GPU)]
    demand = (DemandForecast(WHOLE_GPUS, median, 1.0, gpus=2, latest=latest),)
    loads = whole_gpu_load("h1", 2, 0.3) + whole_gpu_load("h2", 2, 0.3)
    return plan_fleet(
        [observe(nodes[0], pods[0]), observe(nodes[1], pods[1])],
        Forecasts(tuple(loads), demand, "p90_last_hour", True),
        catalog,
        config,
        NOW,
    )


def test_a_node_is_emptied_for_a_pod_that_needs_all_its_gpus_when_its_pod_fits_elsewhere(
    catalog: Catalog,
) -> None:
    first, second = _plan(catalog, PlannerConfig(max_change_share=1.0, eviction_cost_s=300.0)).nodes
    # h1's pod moves to h2's free GPU; emptied, h1 hosts the 2-GPU pod. Its configuration does not change.
    assert first.action == CHANGE and first.rule == RULE
    assert first.desired == first.current
    assert first.disruption == ("team/svc-1 (ReplicaSet)",)
    assert first.pending_served == {WHOLE_GPUS: 2}
    # Gain: the 2 whole GPUs count twice (4), less 300 s of the evicted pod's work (its forecast load: 0.3 on
    # each of h1's two GPUs, one tenant).
    assert first.gain_gpu_hours == pytest.approx(4 - 0.6 * 300 / 3600)
    assert second.action == KEEP  # h2 receives the pod, so it is not emptied too


def test_a_pod_that_may_not_move_keeps_its_node_and_the_other_one_is_emptied(catalog: Catalog) -> None:
    first, second = _plan(catalog, PlannerConfig(max_change_share=1.0), evictable=False).nodes
    assert first.action == KEEP
    assert second.action == CHANGE and second.rule == RULE


def test_no_consolidation_for_a_pod_that_waited_only_minutes_or_when_switched_off(catalog: Catalog) -> None:
    # A 2-GPU pod that waited under half of the last hour (median 0) is not worth an eviction.
    assert all(
        p.action == KEEP for p in _plan(catalog, PlannerConfig(max_change_share=1.0), median=0.0).nodes
    )
    off = PlannerConfig(max_change_share=1.0, consolidation="off")
    assert all(p.action == KEEP for p in _plan(catalog, off).nodes)


def test_pending_now_evicts_for_a_pod_still_pending_and_not_for_one_that_started_since(
    catalog: Catalog,
) -> None:
    config = PlannerConfig(max_change_share=1.0, whole_gpu_demand="pending-now")
    # Arrived in the last half hour (median 0) and still pending: h1 is emptied for it now, not an hour later.
    first, _ = _plan(catalog, config, median=0.0, latest=1.0).nodes
    assert first.action == CHANGE and first.rule == RULE
    # Waited most of the hour (median 1) but started since: nothing is moved for it.
    assert all(p.action == KEEP for p in _plan(catalog, config, median=1.0, latest=0.0).nodes)
    # The default counts the median: the pod that arrived in the last half hour waits for a later plan.
    default = PlannerConfig(max_change_share=1.0)
    assert all(p.action == KEEP for p in _plan(catalog, default, median=0.0, latest=1.0).nodes)


def _release_plan(
    catalog: Catalog,
    loads: dict[str, float],
    plugin: str = "default",
    started_at: datetime | None = None,
    min_age_hours: float | None = None,
) -> FleetPlan:
    """Mode nodes, nothing waiting: 4-GPU H100 nodes h1 and h2 run one plain one-GPU pod each (what it holds is its
    node's forecast load: ``loads`` per GPU), h3 none; h1 shares its GPUs by ``plugin``, and its pod started at
    ``started_at``; ``min_age_hours``: ``planner_release_min_pod_age_hours``, None as shipped. Nodes are released
    at a quarter of their GPUs held (``planner_release_below`` 0.25, not the default half), so that h2 at a half
    stays in use."""
    nodes = [
        node(
            n, model="H100-80GB", mig_config="all-disabled", gpus=4, plugin=plugin if n == "h1" else "default"
        )
        for n in ("h1", "h2", "h3")
    ]
    pods = [dataclasses.replace(pod("svc-1", "h1", GPU), started_at=started_at), pod("svc-2", "h2", GPU)]
    forecasts = [s for n in ("h1", "h2", "h3") for s in whole_gpu_load(n, 4, loads.get(n, 0.0))]
    return plan_fleet(
        [observe(nodes[0], pods[0]), observe(nodes[1], pods[1]), observe(nodes[2])],
        Forecasts(tuple(forecasts), (), "p90_last_hour", True),
        catalog,
        PlannerConfig(
            max_change_share=1.0,
            consolidation="nodes",
            release_below=0.25,
            **({} if min_age_hours is None else {"release_min_pod_age_hours": min_age_hours}),
        ),
        NOW,
    )


def test_nodes_left_without_a_gpu_pod_are_named_for_the_autoscaler(catalog: Catalog) -> None:
    # h1's pod holds 0.4 of its 4 GPUs (at most a quarter: releasable), h2's 2 (it stays in use).
    plan = _release_plan(catalog, {"h1": 0.1, "h2": 0.5})
    # h1 is emptied into h2's room and released.
    assert [p.action for p in plan.nodes] == [CHANGE, KEEP, KEEP]
    assert plan.nodes[0].rule == RULE and plan.nodes[0].pending_served == {}
    (note,) = [n for n in plan.notes if n.startswith("releasable")]
    assert note.endswith("h1, h3")
    # Both carry the standby taint: h1 comes back from its drain empty, and untainted it would be the emptiest
    # node for a spreading scheduler until the next plan.
    assert plan.standby_grades == (("h1", "h3"),)


def test_a_node_is_not_released_into_a_node_that_could_be_released_too(catalog: Catalog) -> None:
    # Both pods hold 0.4 of their node's 4 GPUs. Moving h1's onto h2 frees a node only if the scheduler puts it
    # there; a spreading one puts a pod on the emptiest node in use, where several are nearly empty another of
    # them, which the next plan empties in turn (on the public traces some pods were evicted every hour for
    # months). Nothing is emptied.
    plan = _release_plan(catalog, {"h1": 0.1, "h2": 0.1})
    assert [p.action for p in plan.nodes] == [KEEP, KEEP, KEEP]
    (note,) = [n for n in plan.notes if n.startswith("releasable")]
    assert note.endswith(": h3")


def test_planner_release_min_pod_age_hours_keeps_a_node_whose_pod_started_lately(catalog: Catalog) -> None:
    # h1 as in the first release test. An evicted pod comes back as a new one, so a pod that started an hour ago
    # may have been moved an hour ago: with a minimum age of 3 hours h1 is left alone, at 4 hours it is emptied,
    # and a pod whose start is not known does not stop it.
    def action(started_at: datetime | None, min_age_hours: float | None = 3.0) -> str:
        plan = _release_plan(
            catalog, {"h1": 0.1, "h2": 0.5}, started_at=started_at, min_age_hours=min_age_hours
        )
        return plan.nodes[0].action

    assert action(NOW - timedelta(hours=1)) == KEEP
    assert action(NOW - timedelta(hours=4)) == CHANGE
    assert action(None) == CHANGE
    assert action(NOW, min_age_hours=0.0) == CHANGE  # 0: no minimum
    # As shipped, a pod moved an hour ago holds its node, as one moved five hours ago does.
    assert action(NOW - timedelta(hours=1), None) == action(NOW - timedelta(hours=5), None) == KEEP


def test_a_node_shared_by_mps_is_not_emptied_to_be_released(catalog: Catalog) -> None:
    # h1 as in the first release test, but under MPS: a fractional pod evicted from it goes to a free MPS tenant,
    # which the shared reserve keeps on empty nodes, so emptying h1 would only move the pod to one of those.
    plan = _release_plan(catalog, {"h1": 0.1, "h2": 0.5}, plugin=catalog.device_plugin_config_for(2))
    assert [p.action for p in plan.nodes] == [KEEP, KEEP, KEEP]


@pytest.mark.parametrize("gpus", [4, 8])
def test_planner_release_below_sets_how_empty_a_node_must_be_to_be_released(
    catalog: Catalog, gpus: int
) -> None:
    # Mode nodes, nothing waiting: h1 and h2 each run plain one-GPU pods whose P90 load adds up to half of h1's
    # GPUs and three quarters of h2's (what a pod without a declared share holds is its forecast load), h3
    # nothing. At a quarter no node is emptied; at a half, h1's pods move into h2's free GPUs and h1 is released.
    # Which of the two settings holds depends on the node's size: planner_release_below below 8 GPUs,
    # planner_release_below_large from 8 on (the defaults: a half and a quarter).
    nodes = [node(n, model="H100-80GB", mig_config="all-disabled", gpus=gpus) for n in ("h1", "h2", "h3")]
    pods = {n: [pod(f"svc-{n}-{i}", n, GPU) for i in (1, 2)] for n in ("h1", "h2")}
    loads = [s for n, load in (("h1", 0.5), ("h2", 0.75), ("h3", 0.0)) for s in whole_gpu_load(n, gpus, load)]

    def actions(**release: float) -> list[str]:
        plan = plan_fleet(
            [observe(nodes[0], *pods["h1"]), observe(nodes[1], *pods["h2"]), observe(nodes[2])],
            Forecasts(tuple(loads), (), "p90_last_hour", True),
            catalog,
            PlannerConfig(max_change_share=1.0, consolidation="nodes", **release),
            NOW,
        )
        return [p.action for p in plan.nodes]

    emptied, kept = [CHANGE, KEEP, KEEP], [KEEP, KEEP, KEEP]
    assert actions() == (emptied if gpus < 8 else kept)
    assert actions(release_below=0.25, release_below_large=0.25) == kept
    assert actions(release_below=0.5, release_below_large=0.25) == (emptied if gpus < 8 else kept)
    assert actions(release_below=0.25, release_below_large=0.5) == (kept if gpus < 8 else emptied)


def test_a_pinned_request_no_whole_gpu_can_host_empties_no_node(catalog: Catalog) -> None:
    # T4s (no MIG): h1 (one GPU, full) is the only node the pending requests' label pin allows, and h2 has room
    # for h1's pod. Requests for 0.9 of a GPU pinned there (no MPS share holds them) are worth emptying h1 for;
    # a MIG slice, which no whole GPU hosts, is not.
    def plans(resource: str, share: float | None) -> tuple[str, str]:
        h1 = dataclasses.replace(
            node("h1", model="T4-16GB", mig_config="all-disabled", gpus=1), labels={"pool": "a"}
        )
        h2 = dataclasses.replace(
            node("h2", model="T4-16GB", mig_config="all-disabled", gpus=2), labels={"pool": "b"}
        )
        demand = (DemandForecast(resource, 1.0, 1.0, share=share, node_selector=(("pool", ("a",)),)),)
        loads = whole_gpu_load("h1", 1, 0.3) + whole_gpu_load("h2", 2, 0.3)
        first, second = plan_fleet(
            [observe(h1, pod("svc-1", "h1", GPU)), observe(h2, pod("svc-2", "h2", GPU))],
            Forecasts(tuple(loads), demand, "p90_last_hour", True),
            catalog,
            PlannerConfig(max_change_share=1.0, eviction_cost_s=0.0),
            NOW,
        ).nodes
        return first.rule, second.rule

    assert plans(GPU, 0.9)[0] == RULE
    assert RULE not in plans("nvidia.com/mig-1g.10gb", None)


def _shared_donor_plan(
    catalog: Catalog, donor: GpuNode, donor_pods: list[GpuPod], receiver: GpuNode, demand: DemandForecast
) -> FleetPlan:
    loads = whole_gpu_load(donor.name, donor.gpu_count, 0.3) + whole_gpu_load(
        receiver.name, receiver.gpu_count, 0.1
    )
    return plan_fleet(
        [observe(donor, *donor_pods), observe(receiver)],
        Forecasts(tuple(loads), (demand,), "p90_last_hour", True),
        catalog,
        PlannerConfig(max_change_share=1.0, eviction_cost_s=300.0),
        NOW,
    )


def test_an_mps_node_that_alone_may_host_a_pinned_whole_gpu_pod_is_emptied_and_switched_to_whole_gpus(
    catalog: Catalog,
) -> None:
    # v100: the fleet's one V100 GPU, under MPS (2 tenants), both taken by 0.4-GPU pods. A pod pinned to V100s
    # that needs a whole GPU waited most of the last hour: MPS cannot host it, and whole GPUs cannot host both
    # running pods, so v100's own plan keeps it. t4's four free GPUs take the two pods.
    mps = catalog.device_plugin_config_for(2)
    v100 = node("v100", model="V100-16GB", mig_config="all-disabled", plugin=mps, gpus=1)
    pods = [dataclasses.replace(pod(f"frac-{i}", "v100", GPU), share=0.4) for i in (1, 2)]
    t4 = node("t4", model="T4-16GB", mig_config="all-disabled", gpus=4)
    pinned = DemandForecast(WHOLE_GPUS, 1.0, 1.0, gpus=1, models=("V100-16GB",))
    receiver, donor = _shared_donor_plan(catalog, v100, pods, t4, pinned).nodes  # in name order
    assert donor.action == CHANGE and donor.rule == RULE
    assert donor.desired.device_plugin_config == "default"  # MPS off
    assert donor.desired.mig_config == donor.current.mig_config
    assert donor.disruption == ("team/frac-1 (ReplicaSet)", "team/frac-2 (ReplicaSet)")
    assert sum(donor.pending_served.values()) == 1
    assert any(reason.startswith("MPS off for them") for reason in donor.reasons)
    assert receiver.action == KEEP
    # Without the pin the T4 hosts the pod on a free GPU: nothing is evicted.
    anywhere = DemandForecast(WHOLE_GPUS, 1.0, 1.0, gpus=1)
    assert all(p.rule != RULE for p in _shared_donor_plan(catalog, v100, pods, t4, anywhere).nodes)
