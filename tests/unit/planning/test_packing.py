"""The packing policy: cover running and forecast pending requests with the least stranded capacity."""

from __future__ import annotations

import dataclasses

from slicewise.catalog import Catalog
from slicewise.forecasting.forecasts import DemandForecast, Forecasts
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import BLOCKED, CHANGE, DRAIN, KEEP, SKIP

from .conftest import NOW, forecasts, mig_load, node, observe, pod, whole_gpu_load

MIG_3G = "nvidia.com/mig-3g.40gb"
MIG_1G = "nvidia.com/mig-1g.10gb"


def test_pending_3g_demand_on_an_all_1g_node_gets_a_layout_with_3g_slices(catalog: Catalog) -> None:
    small = node("n1", mig_config="all-1g.10gb")
    running = [pod(f"infer-{i}", "n1", MIG_1G) for i in range(6)]
    plan = plan_fleet(
        [observe(small, *running)],
        forecasts(mig_load(small, 0.5, catalog), {MIG_3G: 4}),
        catalog,
        PlannerConfig(),
        NOW,
    )
    (verdict,) = plan.nodes
    assert verdict.action == CHANGE
    desired = catalog.layout_of(verdict.desired.mig_config, "A100-80GB")
    assert desired is not None
    capacity = dict(desired)
    assert capacity.get("3g.40gb", 0) * 4 >= 4  # every pending 3g request fits
    assert capacity.get("1g.10gb", 0) * 4 >= 6  # and the running 1g pods keep their slices
    assert verdict.gain_gpu_hours > 1.0
    assert len(verdict.disruption) == 6  # a MIG change needs the GPUs free: every GPU pod is evicted
    assert verdict.pending_served == {MIG_3G: 4}


def test_without_pending_demand_the_current_layout_is_kept(catalog: Catalog) -> None:
    balanced = node("n1")
    plan = plan_fleet(
        [observe(balanced, pod("a-1", "n1", MIG_1G))],
        forecasts(mig_load(balanced, 0.5, catalog)),
        catalog,
        PlannerConfig(),
        NOW,
    )
    assert plan.nodes[0].action == KEEP
    assert plan.nodes[0].desired == plan.nodes[0].current
    assert plan.nodes[0].disruption == ()


def test_demand_served_by_one_node_is_not_planned_again_on_the_next(catalog: Catalog) -> None:
    nodes = [node(f"n{i}", mig_config="all-1g.10gb") for i in range(2)]
    plan = plan_fleet(
        [observe(n) for n in nodes],
        forecasts([s for n in nodes for s in mig_load(n, 0.5, catalog)], {MIG_3G: 4}),
        catalog,
        PlannerConfig(max_change_share=1.0),
        NOW,
    )
    assert [p.action for p in plan.nodes] == [CHANGE, KEEP]


def test_non_evictable_pods_block_the_change_or_cordon_when_allowed(catalog: Catalog) -> None:
    small = node("n1", mig_config="all-1g.10gb")
    job = pod("train-1", "n1", MIG_1G, evictable=False, kind="Job")
    inputs = ([observe(small, job)], forecasts(mig_load(small, 0.5, catalog), {MIG_3G: 4}))
    blocked = plan_fleet(*inputs, catalog, PlannerConfig(), NOW).nodes[0]
    drained = plan_fleet(*inputs, catalog, PlannerConfig(cordon_to_drain=True), NOW).nodes[0]
    assert blocked.action == BLOCKED
    assert "team/train-1 (Job)" in blocked.reasons[-1]
    assert drained.action == DRAIN


def test_mps_replicas_grow_for_pending_whole_gpu_requests_while_load_fits(catalog: Catalog) -> None:
    whole = node("h1", model="H100-80GB", mig_config="all-disabled", plugin="mps-2", gpus=2)
    tenants = [pod(f"nb-{i}", "h1", "nvidia.com/gpu") for i in range(4)]
    plan = plan_fleet(
        [observe(whole, *tenants)],
        forecasts(whole_gpu_load("h1", 2, 0.2, memory=0.2), {"nvidia.com/gpu": 4}),
        catalog,
        PlannerConfig(),
        NOW,
    )
    (verdict,) = plan.nodes
    assert verdict.action == CHANGE
    # 8 tenants wanted (4 running + 4 pending over 2 GPUs) -> mps-4; load 0.4 over 4 tenants allows 7 at 70%.
    assert verdict.desired.device_plugin_config == "mps-4"
    assert verdict.desired.mig_config == "all-disabled"


def test_mps_tenants_are_capped_by_their_forecast_load(catalog: Catalog) -> None:
    whole = node("h1", model="H100-80GB", mig_config="all-disabled", plugin="default", gpus=2)
    tenants = [pod(f"svc-{i}", "h1", "nvidia.com/gpu") for i in range(2)]
    plan = plan_fleet(
        [observe(whole, *tenants)],
        # each tenant's P90 load is 0.3 of a GPU: at 70% target only 2 fit per GPU, whatever the demand.
        forecasts(whole_gpu_load("h1", 2, 0.3), {"nvidia.com/gpu": 20}),
        catalog,
        PlannerConfig(),
        NOW,
    )
    assert plan.nodes[0].desired.device_plugin_config == "mps-2"


def test_a_pod_asking_for_two_gpus_keeps_mps_off(catalog: Catalog) -> None:
    whole = node("h1", model="H100-80GB", mig_config="all-disabled", gpus=2)
    plan = plan_fleet(
        [observe(whole, pod("big-1", "h1", "nvidia.com/gpu", 2))],
        forecasts(whole_gpu_load("h1", 2, 0.1), {"nvidia.com/gpu": 6}),
        catalog,
        PlannerConfig(),
        NOW,
    )
    assert plan.nodes[0].action == KEEP
    assert any("more than one GPU" in r for r in plan.nodes[0].reasons)


def test_idle_nodes_alike_share_a_proposal_only_while_the_pending_pool_is_the_same(catalog: Catalog) -> None:
    # Idle nodes' proposals are computed once per (model, size, layout, pending pool): the first node takes
    # the pending demand, so the second sees an empty pool and keeps; the third, idle but of another layout,
    # gets its own proposal.
    idle = [node(f"n{i}", mig_config="all-1g.10gb") for i in range(3)] + [
        node("n3", mig_config="all-3g.40gb")
    ]
    zero = [s for n in idle for s in mig_load(n, 0.0, catalog)]
    zero = [dataclasses.replace(s, memory=0.0) for s in zero]
    plan = plan_fleet(
        [observe(n) for n in idle],
        forecasts(zero, {MIG_3G: 2}),
        catalog,
        PlannerConfig(max_change_share=1.0),
        NOW,
    )
    assert [p.action for p in plan.nodes] == [CHANGE, KEEP, KEEP, KEEP]
    assert plan.nodes[0].pending_served == {MIG_3G: 2}
    assert plan.nodes[1].reasons == plan.nodes[2].reasons  # one proposal, two nodes


def test_pending_pods_that_need_whole_gpus_keep_gpus_whole_and_take_back_idle_mps_ones(
    catalog: Catalog,
) -> None:
    from slicewise.catalog.resources import WHOLE_GPUS

    whole = node("h1", model="H100-80GB", mig_config="all-disabled", plugin="default", gpus=4)
    shared = node("h2", model="H100-80GB", mig_config="all-disabled", plugin="mps-4", gpus=4)
    tenant = pod("svc-0", "h2", "nvidia.com/gpu")
    loads = whole_gpu_load("h1", 4, 0.0, memory=0.0) + whole_gpu_load("h2", 4, 0.05)
    # Many tenants, and pods wanting 6 whole GPUs that waited all of the last hour (median = P90 = 6).
    demand = (DemandForecast("nvidia.com/gpu", 6, 12), DemandForecast(WHOLE_GPUS, 6, 6))
    plan = plan_fleet(
        [observe(whole), observe(shared, tenant)],
        dataclasses.replace(forecasts(loads), demand=demand),
        catalog,
        PlannerConfig(max_change_share=1.0),
        NOW,
    )
    first, second = plan.nodes
    # h1 stays whole (4 of the 6 GPUs) instead of becoming MPS for the tenants.
    assert first.action == KEEP and first.desired.device_plugin_config == "default"
    assert first.rule.startswith("packing: GPUs stay whole")
    # h2 goes back to whole GPUs for the other 2 (h1 took 4 of the 6): its one tenant keeps a GPU of its own, and
    # the fourth GPU takes one of the pending GPU requests.
    assert second.action == CHANGE and second.desired.device_plugin_config == "default"
    assert second.pending_served == {WHOLE_GPUS: 2, "nvidia.com/gpu": 1}
    # Without whole-GPU demand the same fleet shares h1 by MPS.
    plan = plan_fleet(
        [observe(whole), observe(shared, tenant)],
        forecasts(
            whole_gpu_load("h1", 4, 0.0, memory=0.0) + whole_gpu_load("h2", 4, 0.05), {"nvidia.com/gpu": 12}
        ),
        catalog,
        PlannerConfig(max_change_share=1.0),
        NOW,
    )
    assert plan.nodes[0].desired.device_plugin_config != "default"


def test_whole_gpus_are_kept_only_for_pods_that_waited_most_of_the_hour(catalog: Catalog) -> None:
    from slicewise.catalog.resources import WHOLE_GPUS

    whole = node("h1", model="H100-80GB", mig_config="all-disabled", plugin="default", gpus=4)
    loads = whole_gpu_load("h1", 4, 0.0, memory=0.0)

    def plan_for(whole_p50: float) -> str:
        # 12 tenants wait all hour; pods wanting 4 whole GPUs waited at the P90 sample, and at the median or not.
        demand = (DemandForecast("nvidia.com/gpu", 12, 12), DemandForecast(WHOLE_GPUS, whole_p50, 4))
        forecast = dataclasses.replace(forecasts(loads), demand=demand)
        plan = plan_fleet([observe(whole)], forecast, catalog, PlannerConfig(max_change_share=1.0), NOW)
        return plan.nodes[0].desired.device_plugin_config

    # Waiting at the median: the GPUs stay whole for them (4 x 2 GPU-eq beat 12 tenants of 1/4).
    assert plan_for(4) == "default"
    # Seen only at the upper quantile (waited a few minutes, started since): the tenants get the GPUs.
    assert plan_for(0) != "default"


def test_pending_now_keeps_whole_gpus_for_pods_pending_now_at_most_the_hours_upper_quantile(
    catalog: Catalog,
) -> None:
    from slicewise.catalog.resources import WHOLE_GPUS

    whole = node("h1", model="H100-80GB", mig_config="all-disabled", plugin="default", gpus=4)
    loads = whole_gpu_load("h1", 4, 0.0, memory=0.0)

    def plan_for(p50: float, upper: float, latest: float | None, rule: str = "pending-now") -> str:
        # 12 tenants wait all hour; pods wanting 4 whole GPUs: the hour's median and P90, and how many wait now.
        demand = (
            DemandForecast("nvidia.com/gpu", 12, 12),
            DemandForecast(WHOLE_GPUS, p50, upper, latest=latest),
        )
        forecast = dataclasses.replace(forecasts(loads), demand=demand)
        config = PlannerConfig(max_change_share=1.0, whole_gpu_demand=rule)
        return (
            plan_fleet([observe(whole)], forecast, catalog, config, NOW).nodes[0].desired.device_plugin_config
        )

    # Arrived in the last half hour (median 0), pending for several samples and now: the GPUs stay whole.
    assert plan_for(0, 4, 4) == "default"
    # Waited all hour (median 4) but started since (none pending now): the tenants get the GPUs.
    assert plan_for(4, 4, 0) != "default"
    # Pending at the last sample only (below the P90): it may start on its own; the tenants get the GPUs.
    assert plan_for(0, 0, 4) != "default"
    # A forecast that does not say what is pending now: the median, as the default rule always counts.
    assert plan_for(4, 4, None) == "default" and plan_for(0, 4, None) != "default"
    assert plan_for(0, 4, 4, rule="median") != "default"


def test_gpus_without_mig_are_left_alone_in_production_and_shared_by_mps_where_planned(
    catalog: Catalog,
) -> None:
    t4 = node("t4", model="T4-16GB", mig_config="all-disabled", gpus=2)
    inputs = (
        [observe(t4, pod("infer-1", "t4", "nvidia.com/gpu"))],
        forecasts(whole_gpu_load("t4", 2, 0.1), {"nvidia.com/gpu": 3}),
        catalog,
    )
    (left,) = plan_fleet(*inputs, PlannerConfig(plan_gpus_without_mig=False), NOW).nodes
    assert left.action == SKIP and "planner_gpus_without_mig=false" in left.reasons[0]
    (shared,) = plan_fleet(*inputs, PlannerConfig(), NOW).nodes
    # One tenant and three pending on two GPUs: two tenants per GPU (mps-2).
    assert shared.action == CHANGE and shared.desired.device_plugin_config == "mps-2"
    assert shared.desired.mig_config == "all-disabled"


def test_a_declared_share_takes_the_smallest_form_that_holds_it(catalog: Catalog) -> None:
    # Four pending requests of 0.3 of a GPU on an idle 2-GPU A100 node without MIG: three MPS tenants per GPU
    # (1/3 >= 0.3) host all four with the least left unused; whole GPUs would host two, 1/4 tenants none.
    idle = node("a1", mig_config="all-disabled", gpus=2)
    demand = (DemandForecast("nvidia.com/gpu", 4, 4, share=0.3),)
    plan = plan_fleet(
        [observe(idle)],
        Forecasts(tuple(whole_gpu_load("a1", 2, 0.0, memory=0.0)), demand, "p90_last_hour", True),
        catalog,
        PlannerConfig(),
        NOW,
    )
    (verdict,) = plan.nodes
    assert verdict.action == CHANGE and verdict.desired.device_plugin_config == "mps-3"
    assert verdict.pending_served == {"1 x 0.3 GPU": 4}


def test_a_request_for_one_gpu_model_is_only_planned_on_nodes_of_that_model(catalog: Catalog) -> None:
    # Two idle MIG-disabled nodes, an H100 first in name order; the pending requests allow only A100-80GB.
    h100 = node("a-h100", model="H100-80GB", mig_config="all-disabled", gpus=2)
    a100 = node("b-a100", model="A100-80GB", mig_config="all-disabled", gpus=2)
    demand = (DemandForecast("nvidia.com/gpu", 4, 4, share=0.5, models=("A100-80GB",)),)
    loads = whole_gpu_load("a-h100", 2, 0.0, memory=0.0) + whole_gpu_load("b-a100", 2, 0.0, memory=0.0)
    plan = plan_fleet(
        [observe(h100), observe(a100)],
        Forecasts(tuple(loads), demand, "p90_last_hour", True),
        catalog,
        PlannerConfig(max_change_share=1.0),
        NOW,
    )
    first, second = plan.nodes
    assert first.action == KEEP and first.pending_served == {}
    assert second.action == CHANGE and second.desired.device_plugin_config == "mps-2"
    assert second.pending_served == {"1 x 0.5 GPU on A100-80GB": 4}


def test_a_request_pinned_by_a_node_label_is_only_planned_on_nodes_with_that_label(catalog: Catalog) -> None:
    # Two idle A100 nodes alike but for a label; the pending pods' node selector names the second's value (the
    # backtest's pin to a node-list model under one catalogue model, or any label of a pod's nodeSelector).
    first = dataclasses.replace(node("a", mig_config="all-disabled", gpus=2), labels={"pool": "training"})
    second = dataclasses.replace(node("b", mig_config="all-disabled", gpus=2), labels={"pool": "inference"})
    demand = (DemandForecast("nvidia.com/gpu", 4, 4, share=0.5, node_selector=(("pool", ("inference",)),)),)
    loads = whole_gpu_load("a", 2, 0.0, memory=0.0) + whole_gpu_load("b", 2, 0.0, memory=0.0)
    plan = plan_fleet(
        [observe(first), observe(second)],
        Forecasts(tuple(loads), demand, "p90_last_hour", True),
        catalog,
        PlannerConfig(max_change_share=1.0),
        NOW,
    )
    a, b = plan.nodes
    assert a.action == KEEP and a.pending_served == {}
    assert b.action == CHANGE and b.desired.device_plugin_config == "mps-2"
    assert b.pending_served == {"1 x 0.5 GPU where pool in inference": 4}


def test_a_split_config_hosts_a_running_multi_gpu_pod_and_pending_small_requests_on_one_node(
    catalog: Catalog,
) -> None:
    # 8 whole H100s; a 4-GPU pod runs; 28 pods of one 1g slice each wait. Only a per-GPU config serves both:
    # MIG with seven 1g slices on GPUs 0-3 (4 x 7 = 28), GPUs 4-7 whole for the running pod.
    whole = node("h1", model="H100-80GB", mig_config="all-disabled", gpus=8)
    running = pod("train-1", "h1", "nvidia.com/gpu", 4)
    inputs = ([observe(whole, running)], forecasts(whole_gpu_load("h1", 8, 0.5), {MIG_1G: 28}))
    (split,) = plan_fleet(*inputs, catalog, PlannerConfig(), NOW).nodes  # split configs are on by default
    assert split.action == CHANGE
    assert split.desired.mig_config == "sw-4of8-1gx7"
    layouts = catalog.gpu_layouts(split.desired.mig_config, "H100-80GB", 8)
    assert layouts == (((("1g.10gb", 7),),) * 4) + (None,) * 4
    assert split.pending_served == {MIG_1G: 28}
    assert "MIG 7 x 1g.10gb on 4 of 8 GPUs, 4 whole" in " ".join(split.reasons)
    # Without split configs no layout keeps the 4-GPU pod and serves the slices at once
    # (all-1g on 8 GPUs would evict the pod with nowhere to go): the node stays whole and the slices wait.
    (homogeneous,) = plan_fleet(*inputs, catalog, PlannerConfig(split_layouts=False), NOW).nodes
    assert homogeneous.action == KEEP and homogeneous.pending_served == {}
