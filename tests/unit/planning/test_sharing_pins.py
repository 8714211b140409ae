"""Pods that pin a sharing mode with a nodeSelector on GPU feature discovery's labels
(``nvidia.com/gpu.sharing-strategy``, ``nvidia.com/gpu.replicas``): the planner hosts them only under a
configuration that gives the node those labels."""

from __future__ import annotations

import dataclasses

from slicewise.catalog import Catalog
from slicewise.cluster.base import REPLICAS_LABEL, SHARING_STRATEGY_LABEL
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
    catalog: Catalog, selector: tuple[tuple[str, tuple[str, ...]], ...]
) -> tuple[str, str, dict[str, float]]:
    # One idle 2-GPU A100 with MIG off; two pending pods asking one nvidia.com/gpu each.
    idle = node("a", mig_config="all-disabled", gpus=2)
    demand = (DemandForecast(GPU, 2, 2, node_selector=selector),)
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
