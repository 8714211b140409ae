"""Allocation: MIG slices by their share, MPS tenants by 1/replicas, whole GPUs by 1, the rest unallocated;
every number below is worked out by hand from one hour of constant samples."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from slicewise.costs import allocation
from slicewise.costs.samples import GPU_UTIL, NO_WORKLOAD, NOT_MEASURED, hour_samples
from slicewise.costs.sharing import LayoutHistory, ledger_event
from tests.unit.costs.frames import (
    A100_80,
    CATALOG,
    H100,
    H200,
    HOUR,
    NAN,
    NO_HISTORY,
    PRICES,
    balanced_a100,
    demand_frame,
    gpu_frame,
    observed_at,
    one,
    requests,
    series,
)


def allocate(
    gpu: pd.DataFrame,
    demand: pd.DataFrame | None = None,
    history: LayoutHistory = NO_HISTORY,
    mode: str = "compute",
) -> pd.DataFrame:
    demand = demand if demand is not None else demand_frame()
    samples = hour_samples(gpu, demand, catalog=CATALOG, history=history, mig_share_mode=mode)
    return allocation.allocation_rows(samples, prices=PRICES, history=history)


def reconciles(rows: pd.DataFrame) -> None:
    """Per row: allocated = used + idle + not measured."""
    total = rows["usedGpuHours"] + rows["idleGpuHours"] + rows["unmeasuredGpuHours"]
    np.testing.assert_allclose(rows["gpuHours"], total, atol=1e-9)
    np.testing.assert_allclose(rows["gpuCost"], rows["gpuHours"] * rows["price_per_gpu_hour"], atol=1e-9)


def test_a_mig_split_charges_each_tenant_its_compute_share_and_the_idle_slice_is_unallocated() -> None:
    rows = allocate(balanced_a100())
    a = one(rows, namespace="team-a")
    assert a["gpuHours"] == pytest.approx(3 / 7)
    assert a["usedGpuHours"] == pytest.approx(0.5 * 3 / 7)
    assert a["idleGpuHours"] == pytest.approx(0.5 * 3 / 7)
    assert a["gpuCost"] == pytest.approx(2.0 * 3 / 7)
    assert a["gpuCostIdle"] == pytest.approx(3 / 7)
    assert a["gpuEfficiency"] == pytest.approx(0.5)
    assert a["resource"] == "nvidia_com_mig_3g_40gb" and a["sharing"] == "mig"
    assert a["name"] == "team-a/a/" and a["minutes"] == 60
    b = one(rows, namespace="team-b")
    assert (b["gpuHours"], b["usedGpuHours"]) == pytest.approx((2 / 7, 0.25 * 2 / 7))
    c = one(rows, namespace="team-c")
    assert (c["gpuHours"], c["usedGpuHours"], c["idleGpuHours"]) == pytest.approx((1 / 7, 1 / 7, 0.0))
    idle = one(rows, namespace=NO_WORKLOAD)
    assert idle["name"] == NO_WORKLOAD and idle["resource"] == "nvidia_com_mig_1g_10gb"
    assert (idle["gpuHours"], idle["usedGpuHours"], idle["gpuCost"]) == pytest.approx((1 / 7, 0.0, 2 / 7))
    reconciles(rows)
    # The four slices are the whole GPU: one GPU-hour at $2, nothing lost or double-counted.
    assert rows["gpuHours"].sum() == pytest.approx(1.0)
    assert rows["gpuCost"].sum() == pytest.approx(2.0)


def test_with_memory_shares_the_same_split_counts_memory_slices_over_eight() -> None:
    rows = allocate(balanced_a100(), mode="memory")
    assert one(rows, namespace="team-a")["gpuHours"] == pytest.approx(4 / 8)
    assert one(rows, namespace="team-b")["gpuHours"] == pytest.approx(2 / 8)
    assert one(rows, namespace="team-c")["gpuHours"] == pytest.approx(1 / 8)
    assert one(rows, namespace=NO_WORKLOAD)["gpuHours"] == pytest.approx(1 / 8)
    assert rows["gpuHours"].sum() == pytest.approx(1.0)


def test_compute_slices_no_instance_covers_are_unallocated_capacity() -> None:
    """3g+3g uses 6 of 7 compute slices (but all 8 memory slices)."""
    gpu = gpu_frame(
        series("node-h", 0, H200, profile="3g.71gb", instance="1", namespace="llm", pod="x", engine=1.0),
        series("node-h", 0, H200, profile="3g.71gb", instance="2", namespace="llm", pod="y", engine=0.0),
    )
    rows = allocate(gpu)
    uncovered = one(rows, sharing="uncovered")
    assert uncovered["namespace"] == NO_WORKLOAD
    assert (uncovered["gpuHours"], uncovered["usedGpuHours"], uncovered["gpuCost"]) == pytest.approx(
        (1 / 7, 0, 5 / 7)
    )
    assert rows["gpuHours"].sum() == pytest.approx(1.0)
    memory = allocate(gpu, mode="memory")
    assert "uncovered" not in set(memory["sharing"])
    assert memory.loc[memory["namespace"] == "llm", "gpuHours"].sum() == pytest.approx(1.0)


def mps_node(engine: float, tenants: int = 3) -> tuple[pd.DataFrame, pd.DataFrame, LayoutHistory]:
    """One H100 shared by MPS with 4 replicas (device-plugin config from an observed snapshot)."""
    gpu = gpu_frame(series("node-mps", 0, H100, engine=engine))
    demand = demand_frame(*(requests("node-mps", f"team-{k}", f"p{k}") for k in range(tenants)))
    history = LayoutHistory.of(observed_at(HOUR - timedelta(minutes=15), "node-mps", "mps-4"))
    return gpu, demand, history


def test_mps_tenants_hold_a_quarter_each_and_split_the_gpus_activity_as_an_estimate() -> None:
    gpu, demand, history = mps_node(engine=0.6)
    rows = allocate(gpu, demand, history)
    for k in range(3):
        tenant = one(rows, namespace=f"team-{k}")
        # Each holds 1/4 of the GPU; the GPU's 0.6 GPU-h of activity is split over 3/4 held: 0.2 each.
        assert (tenant["gpuHours"], tenant["usedGpuHours"], tenant["idleGpuHours"]) == pytest.approx(
            (0.25, 0.2, 0.05)
        )
        assert tenant["usage_estimate"] and tenant["sharing"] == "mps"
        assert tenant["mps_replicas"] == 4 and tenant["replicas_method"] == "observed"
        assert "estimate" in tenant["usage_method"]
    spare = one(rows, namespace=NO_WORKLOAD)
    assert (spare["gpuHours"], spare["usedGpuHours"], spare["gpuCost"]) == pytest.approx((0.25, 0.0, 1.0))
    reconciles(rows)
    assert rows["gpuHours"].sum() == pytest.approx(1.0)


def test_an_mps_tenant_that_sits_idle_is_charged_its_share_of_usage_because_dcgm_cannot_tell() -> None:
    """Four tenants, one of them idle in truth: DCGM shows one GPU at 0.6, so each is estimated at 0.15."""
    gpu, demand, history = mps_node(engine=0.6, tenants=4)
    rows = allocate(gpu, demand, history)
    used = rows.loc[rows["namespace"] != NO_WORKLOAD, "usedGpuHours"]
    assert len(used) == 4
    np.testing.assert_allclose(used, 0.15)
    assert rows["usage_estimate"].all()
    assert NO_WORKLOAD not in set(rows["namespace"])


def test_mps_activity_beyond_the_tenants_shares_stays_on_the_unallocated_line() -> None:
    gpu, demand, history = mps_node(engine=0.9)
    rows = allocate(gpu, demand, history)
    for k in range(3):
        assert one(rows, namespace=f"team-{k}")["usedGpuHours"] == pytest.approx(0.25)
    assert one(rows, namespace=NO_WORKLOAD)["usedGpuHours"] == pytest.approx(0.15)
    assert rows["usedGpuHours"].sum() == pytest.approx(0.9)


def test_without_history_mps_replicas_are_inferred_from_the_demand_and_say_so() -> None:
    gpu = gpu_frame(series("n", 0, H100, engine=0.3), series("n", 1, H100, engine=0.3))
    demand = demand_frame(*(requests("n", "team", f"p{k}") for k in range(5)))
    rows = allocate(gpu, demand)
    tenant = one(rows, pod="p0")
    assert tenant["mps_replicas"] == 3 and tenant["replicas_method"] == "demand"  # ceil(5 requests / 2 GPUs)
    assert tenant["gpuHours"] == pytest.approx(1 / 3)
    assert one(rows, namespace=NO_WORKLOAD)["gpuHours"] == pytest.approx(2 - 5 / 3)


def test_whole_gpus_go_to_the_pod_dcgm_names_and_an_unlabelled_unshared_gpu_is_unallocated() -> None:
    gpu = gpu_frame(
        series("w", 0, H100, namespace="train", pod="t", engine=0.8),
        series("w", 1, H100, engine=0.0),
    )
    rows = allocate(gpu, demand_frame(requests("w", "train", "t")))
    t = one(rows, namespace="train")
    assert (t["gpuHours"], t["usedGpuHours"], t["gpuCost"]) == pytest.approx((1.0, 0.8, 4.0))
    assert t["replicas_method"] == "default" and t["mps_replicas"] == 1
    assert one(rows, namespace=NO_WORKLOAD)["gpuHours"] == pytest.approx(1.0)


def test_a_node_whose_layout_changed_mid_day_is_allocated_by_the_layout_of_each_hour() -> None:
    """node-m: MIG 1 x 7g before, 7 x 1g after (DCGM's series show it). node-s: MPS 2 -> 4 replicas (the
    observed snapshots before and after say so). Two tenants on node-s all day."""
    later = HOUR + timedelta(hours=3)
    gpu = gpu_frame(
        series("node-m", 0, A100_80, profile="7g.80gb", instance="0", namespace="big", pod="whole", engine=0.7),
        *(
            series("node-m", 0, A100_80, profile="1g.10gb", instance=str(k), namespace="small", pod=f"s{k}",
                   engine=0.5, start=later)
            for k in range(1, 4)
        ),
        *(series("node-m", 0, A100_80, profile="1g.10gb", instance=str(k), start=later) for k in range(4, 8)),
        series("node-s", 0, H100, engine=0.4),
        series("node-s", 0, H100, engine=0.4, start=later),
    )  # fmt: skip
    demand = demand_frame(
        *(requests("node-s", "serve", f"r{k}", start=start) for k in range(2) for start in (HOUR, later))
    )
    history = LayoutHistory.of(
        [
            *observed_at(HOUR - timedelta(minutes=15), "node-s", "mps-2"),
            *observed_at(later - timedelta(minutes=15), "node-s", "mps-4"),
        ]
    )
    rows = allocate(gpu, demand, history)
    before, after = (
        rows[rows["start"] == "2026-11-24T10:00:00Z"],
        rows[rows["start"] == "2026-11-24T13:00:00Z"],
    )
    assert one(before, namespace="big")["gpuHours"] == pytest.approx(1.0)
    assert after.loc[after["namespace"] == "small", "gpuHours"].sum() == pytest.approx(3 / 7)
    assert one(after, node="node-m", namespace=NO_WORKLOAD)["gpuHours"] == pytest.approx(4 / 7)
    assert one(before, pod="r0")["gpuHours"] == pytest.approx(0.5)
    assert one(before, pod="r0")["mps_replicas"] == 2
    assert one(after, pod="r0")["gpuHours"] == pytest.approx(0.25)
    assert one(after, node="node-s", namespace=NO_WORKLOAD)["gpuHours"] == pytest.approx(0.5)
    for hour in (before, after):  # two GPUs each hour, whatever the layout
        assert hour["gpuHours"].sum() == pytest.approx(2.0)


def test_an_applied_change_in_the_ledger_overrides_an_older_snapshot() -> None:
    gpu = gpu_frame(series("node-s", 0, H100, engine=0.4))
    demand = demand_frame(requests("node-s", "serve", "r0"))
    history = LayoutHistory.of(
        [
            *observed_at(HOUR - timedelta(hours=2), "node-s", "mps-2"),
            ledger_event(
                "node-s", HOUR - timedelta(minutes=40), {"nvidia.com/device-plugin.config": "mps-4"}
            ),
        ]
    )
    tenant = one(allocate(gpu, demand, history), pod="r0")
    assert tenant["mps_replicas"] == 4 and tenant["replicas_method"] == "ledger"


def test_missing_profiling_metrics_are_not_measured_and_whole_gpus_fall_back_to_gpu_util() -> None:
    gpu = gpu_frame(
        series("m", 0, A100_80, profile="7g.80gb", instance="0", namespace="mig", pod="p", engine=NAN),
        series("w", 0, H100, namespace="util", pod="u", engine=NAN, gpu_util=40.0),
        series("w", 1, H100, namespace="blind", pod="b", engine=NAN, gpu_util=NAN),
    )
    rows = allocate(gpu)
    mig = one(rows, namespace="mig")
    assert mig["usage_method"] == NOT_MEASURED
    assert (mig["gpuHours"], mig["usedGpuHours"], mig["idleGpuHours"]) == (1.0, 0.0, 0.0)
    assert (
        mig["unmeasuredGpuHours"] == 1.0
        and np.isnan(mig["gpuEfficiency"])
        and np.isnan(mig["gpuUsageAverage"])
    )
    util = one(rows, namespace="util")
    assert util["usage_method"] == GPU_UTIL and util["usedGpuHours"] == pytest.approx(0.4)
    assert one(rows, namespace="blind")["unmeasuredGpuHours"] == 1.0
    reconciles(rows)


def test_namespace_totals_plus_unallocated_are_the_cluster_capacity_times_the_price() -> None:
    gpu_, demand, history = mps_node(engine=0.6)
    gpu = pd.concat([balanced_a100(), gpu_], ignore_index=True)
    rows = allocate(gpu, demand, history)
    namespaces = allocation.by_namespace(rows)
    assert namespaces["namespace"].iloc[-1] == NO_WORKLOAD
    # 1 A100-80GB at $2 + 1 H100 at $4 for one hour.
    assert namespaces["gpuCost"].sum() == pytest.approx(2.0 + 4.0)
    assert namespaces["gpuHours"].sum() == pytest.approx(allocation.physical_gpu_hours(gpu))
    totals = allocation.totals(rows)
    assert totals["gpuHours"] == pytest.approx(2.0)
    assert totals["unallocatedGpuHours"] == pytest.approx(1 / 7 + 0.25)
    assert totals["unallocatedCost"] == pytest.approx(2 / 7 + 1.0)
    assert totals["gpuHours"] == pytest.approx(
        totals["usedGpuHours"] + totals["idleGpuHours"] + totals["unmeasuredGpuHours"]
    )


def test_teams_follow_the_map_and_default_to_the_namespace() -> None:
    samples = hour_samples(balanced_a100(), demand_frame(), catalog=CATALOG, history=NO_HISTORY)
    teams = allocation.team_map('{"team-a": "platform", "team-b": "platform"}')
    rows = allocation.allocation_rows(samples, prices=PRICES, history=NO_HISTORY, teams=teams)
    by_team = allocation.by_namespace(rows, key="team").set_index("team")["gpuHours"]
    assert by_team["platform"] == pytest.approx(5 / 7)
    assert by_team["team-c"] == pytest.approx(1 / 7)
    with pytest.raises(ValueError, match="cost_team_map"):
        allocation.team_map('["not", "a", "map"]')


def test_allocation_rows_join_an_opencost_response_by_its_allocation_names() -> None:
    from slicewise.costs import opencost

    rows = allocate(balanced_a100())
    start = rows["start"].iloc[0]  # one hour: 2026-...T..:00:00Z
    hour = {"start": start, "end": rows["end"].iloc[0]}

    def entry(name: str, cpu: float) -> dict[str, object]:
        # What OpenCost returns per allocation with aggregate=namespace,pod,container, step=1h, includeIdle=true.
        window = {"start": start.replace("Z", "+00:00"), "end": hour["end"]}
        return {
            "name": name,
            "window": window,
            **hour,
            "cpuCost": cpu,
            "ramCost": cpu / 2,
            "totalCost": 3 * cpu,
        }

    response = {
        "code": 200,
        "data": [
            {
                "team-a/a/": entry("team-a/a/", 0.4),
                "team-b/b/": entry("team-b/b/", 0.2),
                "__idle__": entry("__idle__", 1.0),
                "kube-system/coredns-1/coredns": entry(
                    "kube-system/coredns-1/coredns", 0.05
                ),  # no GPU: not ours
            }
        ],
    }
    joined = opencost.join(rows, response).set_index("name")
    assert set(joined.index) == {"team-a/a/", "team-b/b/", "team-c/c/", NO_WORKLOAD}
    assert joined.loc["team-a/a/", "cpuCost"] == pytest.approx(0.4)
    assert joined.loc["team-a/a/", "gpuHours"] == pytest.approx(3 / 7)
    # Capacity no workload holds is OpenCost's __idle__ on both sides.
    assert joined.loc[NO_WORKLOAD, "cpuCost"] == pytest.approx(1.0)
    assert joined.loc[NO_WORKLOAD, "gpuHours"] == pytest.approx(1 / 7)
    # A pod OpenCost did not report keeps its GPU figures and gets no OpenCost cost, not zero.
    assert np.isnan(joined.loc["team-c/c/", "cpuCost"]) and joined.loc["team-c/c/", "gpuHours"] > 0
