"""Re-homing (``planner_rehome``): fractional pods on whole GPUs are listed to move to free MPS tenants."""

from __future__ import annotations

import dataclasses

import pytest

from slicewise.catalog import Catalog
from slicewise.cluster.base import GpuPod
from slicewise.forecasting.forecasts import DemandForecast, Forecasts
from slicewise.planning.config import PlannerConfig, PlannerConfigError
from slicewise.planning.demand import WHOLE_GPUS
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import FleetPlan, NodeObservation, PodMove

from .conftest import NOW, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"
# Nothing changes and nothing is consolidated: the moves depend on the nodes as they are.
STILL = PlannerConfig(max_change_share=0.0, shared_reserve=0.0, standby=False, consolidation="off")


def fractional(name: str, node_name: str, share: float, *, evictable: bool = True) -> GpuPod:
    return dataclasses.replace(pod(name, node_name, GPU, evictable=evictable), share=share)


def plan(
    catalog: Catalog,
    observations: list[NodeObservation],
    config: PlannerConfig = STILL,
    waiting_whole_gpus: float = 0.0,
) -> FleetPlan:
    load = []
    for o in observations:
        load += whole_gpu_load(o.node.name, o.node.gpu_count, 0.9)
    demand = (
        (DemandForecast(WHOLE_GPUS, waiting_whole_gpus, waiting_whole_gpus),) if waiting_whole_gpus else ()
    )
    return plan_fleet(observations, Forecasts(tuple(load), demand, "p90", True), catalog, config, NOW)


def fleet(catalog: Catalog, *donor_pods: GpuPod, tenants_used: int = 1, cordoned: bool = False) -> list:
    """``whole-1``: two whole T4s, one held by a one-GPU pod, the other by ``donor_pods``; ``mps-1``: one T4
    shared by two MPS tenants, ``tenants_used`` of them taken."""
    mps = catalog.device_plugin_config_for(2)
    return [
        observe(
            node("whole-1", "T4-16GB", "all-disabled", gpus=2), pod("job-1", "whole-1", GPU), *donor_pods
        ),
        observe(
            node("mps-1", "T4-16GB", "all-disabled", mps, 1, cordoned=cordoned),
            *[fractional(f"tenant-{i}", "mps-1", 0.5) for i in range(tenants_used)],
        ),
    ]


def test_a_fractional_pod_on_a_whole_gpu_moves_to_a_free_tenant(catalog: Catalog) -> None:
    result = plan(catalog, fleet(catalog, fractional("small-1", "whole-1", 0.4)))
    assert result.moves == (PodMove("team", "small-1", "whole-1", 0.4, ("mps-1",)),)
    assert [n for n in result.notes if n.startswith("re-homed")] == [
        "re-homed: 1 fractional pods on whole GPUs move to free MPS tenants: "
        "team/small-1 (0.4 GPU) from whole-1 to a tenant on mps-1"
    ]
    off = plan(
        catalog,
        fleet(catalog, fractional("small-1", "whole-1", 0.4)),
        dataclasses.replace(STILL, rehome="off"),
    )
    assert off.moves == ()
    assert not [n for n in off.notes if n.startswith("re-homed")]


@pytest.mark.parametrize(
    ("donor", "tenants_used", "cordoned", "why"),
    [
        (fractional("big-1", "whole-1", 0.6), 1, False, "bigger than a tenant (1/2 GPU)"),
        (fractional("small-1", "whole-1", 0.4, evictable=False), 1, False, "may not be evicted"),
        (pod("undeclared-1", "whole-1", GPU), 1, False, "declares no share"),
        (fractional("small-1", "whole-1", 0.4), 2, False, "no tenant free"),
        (fractional("small-1", "whole-1", 0.4), 1, True, "the MPS node is cordoned"),
    ],
)
def test_no_move_when_the_pod_or_the_tenant_does_not_allow_it(
    catalog: Catalog, donor: GpuPod, tenants_used: int, cordoned: bool, why: str
) -> None:
    assert plan(catalog, fleet(catalog, donor, tenants_used=tenants_used, cordoned=cordoned)).moves == (), why


def test_one_pod_per_free_tenant(catalog: Catalog) -> None:
    # Two fractional pods on whole GPUs of a 3-GPU node, one tenant free: the first in name order moves.
    mps = catalog.device_plugin_config_for(2)
    observations = [
        observe(
            node("whole-1", "T4-16GB", "all-disabled", gpus=3),
            pod("job-1", "whole-1", GPU),
            fractional("small-a", "whole-1", 0.3),
            fractional("small-b", "whole-1", 0.45),
        ),
        observe(node("mps-1", "T4-16GB", "all-disabled", mps, 1), fractional("tenant-0", "mps-1", 0.5)),
    ]
    assert [m.pod for m in plan(catalog, observations).moves] == ["small-a"]


def test_waiting_moves_only_while_whole_gpu_requests_wait(catalog: Catalog) -> None:
    waiting = dataclasses.replace(STILL, rehome="waiting")
    observations = fleet(catalog, fractional("small-1", "whole-1", 0.4))
    assert plan(catalog, observations, waiting).moves == ()
    assert [m.pod for m in plan(catalog, observations, waiting, waiting_whole_gpus=1.0).moves] == ["small-1"]


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(PlannerConfigError, match="planner_rehome must be one of"):
        PlannerConfig(rehome="sometimes")
