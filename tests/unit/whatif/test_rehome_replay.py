"""Re-homing in the replay (``planner_rehome``): a fractional pod the plan moves off a whole GPU onto a free MPS
tenant gives that GPU to a one-GPU pod that waits; every figure computed by hand."""

from __future__ import annotations

import pytest

from slicewise.catalog import load_catalog
from slicewise.planning.config import PlannerConfig
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.policies import POLICIES
from slicewise.whatif.trace import ONE_GPU, TraceNode, TracePod

CATALOG = load_catalog()


@pytest.mark.parametrize(
    ("rehome", "evicted", "w2_wait_s"), [("always", 1, 2100.0), ("waiting", 1, 2100.0), ("off", 0, 18_502.0)]
)
def test_a_fractional_pod_moved_to_a_tenant_frees_its_gpu_for_a_waiting_pod(
    rehome: str, evicted: int, w2_wait_s: float
) -> None:
    # n2 shares its one GPU by MPS between two tenants of half a GPU; n1 has two whole GPUs. t1 and t2 take the
    # tenants; f (0.4 of a GPU) finds none and takes a whole GPU of n1, w1 the other. t2 leaves at 1001 s: a tenant
    # is free. w2 arrives at 1500 s and waits. The plan at 3600 s moves f onto the free tenant (no eviction cost:
    # it restarts at once), and w2 takes f's GPU: 2100 s of waiting. Without the move w2 waits for f to end at
    # 20,002 s: 18,502 s.
    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0, rehome=rehome)
    config = BacktestConfig(eviction_cost_s=0.0, planner=planner)
    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 1, "T4")]
    pods = (
        TracePod("t1", 0, 20_000, 1, 0.25, "LS", ()),
        TracePod("t2", 1, 1000, 1, 0.25, "LS", ()),
        TracePod("f", 2, 20_000, 1, 0.4, "LS", ()),
        TracePod("w1", 10, 20_000, 1, 1.0, "LS", ()),
        TracePod("w2", 1500, 5000, 1, 1.0, "LS", ()),
    )
    mps = ("all-disabled", CATALOG.device_plugin_config_for(2))
    result = Replay(
        POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, 30_000.0), [("all-disabled", "default"), mps]
    ).run()
    assert result.pods_evicted == evicted
    assert result.evictions_by_rule == {
        "reconfiguration": 0,
        "consolidation": 0,
        "rehome": evicted,
        "autoscaler": 0,
    }
    assert result.wait_by_class[ONE_GPU].mean_s == pytest.approx(w2_wait_s / 2)  # w1 waited 0
    assert result.still_waiting == 0
