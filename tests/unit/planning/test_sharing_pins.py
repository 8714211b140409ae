"""Pods that pin a sharing mode with a nodeSelector on GPU feature discovery's labels
(``nvidia.com/gpu.sharing-strategy``, ``nvidia.com/gpu.replicas``): the planner hosts them only under a
configuration that gives the node those labels."""

from __future__ import annotations

import dataclasses

from slicewise.catalog import Catalog
from slicewise.cluster.base import GPU_PRODUCT_LABEL, REPLICAS_LABEL, SHARED_SUFFIX, SHARING_STRATEGY_LABEL
from slicewise.forecasting.forecasts import DemandForecast, Forecasts
from slicewise.planning import packing
from slicewise.planning.config import PlannerConfig
from slicewise.planning.demand import Pool
from slicewise.planning.node import node_context
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import CHANGE, KEEP

from .conftest import NOW, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"


def _plan(
    catalog: Catalog,
    selector: tuple[tuple[str, tuple[str, ...]], ...],
    share: float | None = None,
    count: int = 2,
) -> tuple[str, str, dict[str, float]]:
    # One idle 2-GPU A100 with MIG off; ``count`` pending pods asking one nvidia.com/gpu each (of ``share``).
    idle = node("a", mig_config="all-disabled", gpus=2)
    demand = (DemandForecast(GPU, count, count, share=share, node_selector=selector),)
    plan = plan_fleet(
        [observe(idle)],
        Forecasts(tuple(whole_gpu_load("a", 2, 0.0, memory=0.0)), demand, "p90_last_hour", True),
        catalog,
        PlannerConfig(max_change_share=1.0),
        NOW,
    )
    (verdict,) = plan.nodes
    return verdict.action, verdict.desired.device_plugin_config, dict(verdict.pending_served)


def test_unpinned_requests_take_the_whole_gpus_as_they_are(catalog: Catalog) -> None:
    action, plugin, _ = _plan(catalog, ())
    assert action == KEEP and plugin == "default"


def test_requests_pinned_to_mps_make_the_node_share_its_gpus(catalog: Catalog) -> None:
    action, plugin, served = _plan(catalog, ((SHARING_STRATEGY_LABEL, ("mps",)),))
    assert action == CHANGE and plugin.startswith("mps-")
    assert served == {f"{GPU} where {SHARING_STRATEGY_LABEL} in mps": 2}


def test_requests_pinned_to_a_replica_count_get_exactly_that_count(catalog: Catalog) -> None:
    action, plugin, _ = _plan(catalog, ((REPLICAS_LABEL, ("4",)),))
    assert action == CHANGE and plugin == catalog.device_plugin_config_for(4)


def test_a_running_pod_pinned_to_mps_is_lost_under_whole_gpus_and_kept_under_mps(catalog: Catalog) -> None:
    shared = node("b", mig_config="all-disabled", plugin=catalog.device_plugin_config_for(2), gpus=2)
    pinned = dataclasses.replace(pod("svc-1", "b", GPU), node_selector={SHARING_STRATEGY_LABEL: ("mps",)})
    ctx = node_context(observe(shared, pinned), whole_gpu_load("b", 2, 0.3), catalog)
    whole = packing.place(ctx, packing.Candidate(None, 1), Pool(), 1.0)
    mps = packing.place(ctx, packing.Candidate(None, 2), Pool(), 1.0)
    assert whole.lost > 0 and mps.lost == 0


def test_requests_pinned_to_the_plain_product_are_not_planned_onto_mps_which_renames_it(
    catalog: Catalog,
) -> None:
    # GFD writes nvidia.com/gpu.product with -SHARED on a node shared by MPS: a pod selecting the plain product
    # no longer fits there, one selecting the -SHARED name only fits there.
    product = catalog.model("A100-80GB").gpu_product
    # Four pods declaring half a GPU: unpinned, MPS with 2 tenants hosts all four on the two GPUs.
    assert _plan(catalog, (), share=0.5, count=4)[1] == catalog.device_plugin_config_for(2)
    plain = _plan(catalog, ((GPU_PRODUCT_LABEL, (product,)),), share=0.5, count=4)
    shared = _plan(catalog, ((GPU_PRODUCT_LABEL, (product + SHARED_SUFFIX,)),), share=0.5, count=4)
    assert plain[0] == KEEP and plain[1] == "default"
    assert shared[0] == CHANGE and shared[1] == catalog.device_plugin_config_for(2)


def test_labels_under_a_configuration_follow_what_gpu_feature_discovery_writes(catalog: Catalog) -> None:
    shared = node("c", mig_config="all-disabled", plugin=catalog.device_plugin_config_for(4), gpus=2)
    product = shared.gpu_product
    shared = dataclasses.replace(shared, labels={GPU_PRODUCT_LABEL: product + SHARED_SUFFIX, "zone": "z1"})
    assert packing.labels_under(shared, 1) == {
        GPU_PRODUCT_LABEL: product,
        SHARING_STRATEGY_LABEL: "none",
        REPLICAS_LABEL: "1",
        "zone": "z1",
    }
    assert packing.labels_under(shared, 4)[GPU_PRODUCT_LABEL] == product + SHARED_SUFFIX
    assert packing.labels_under(shared, 4)[REPLICAS_LABEL] == "4"
