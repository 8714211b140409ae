"""What the DAGs would have left behind, written into a temporary SLICEWISE_HOME for the plugin's pages:
a cost report (summary.json, report.html with real PNG plots, allocation.csv), a plan, a rollout ledger and the
simulated cluster's state."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from slicewise.cluster.base import LAST_CHANGE_ANNOTATION, MIG_CONFIG_LABEL
from slicewise.planning.types import CHANGE, KEEP, DesiredState, FleetPlan, NodePlan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REPORT_DATE = "2026-11-28"
OLDER_REPORT_DATE = "2026-11-27"
PLAN_RUN = "asset_triggered__2026-11-29T11:05:00+00:00"
CHANGED_NODE = "sim-a100-80-0"
#: What the rollout's start tells of a standby taint it added (slicewise.rollout.standby.Marked.describe).
STANDBY_MARK = (
    "standby taint slicewise.io/standby:PreferNoSchedule added on 1 nodes (sim-h200-0), removed from 0 (-)"
)

#: The shape docs/costs.md documents for ``summary.json`` (gpu_cost_report writes it).
SUMMARY: dict[str, Any] = {
    "date": REPORT_DATE,
    "partial": False,
    "window": {"start": "2026-11-28T00:00:00+00:00", "end": "2026-11-29T00:00:00+00:00"},
    "hours": {"in_window": 24, "published": 23, "missing": ["2026-11-28T13:00:00+00:00"]},
    "currency": "USD",
    "default_price_per_gpu_hour": 0.95,
    "cost_mig_share": "compute",
    "totals": {
        "gpuHours": 576.0,
        "usedGpuHours": 301.25,
        "idleGpuHours": 274.75,
        "unmeasuredGpuHours": 0.0,
        "unallocatedGpuHours": 96.0,
        "allocatedGpuHours": 480.0,
        "allocatedIdleGpuHours": 178.75,
        "gpuCost": 456.0,
        "gpuCostIdle": 261.01,
        "allocatedCostIdle": 169.81,
        "unallocatedCost": 91.2,
        "capacityGpuHours": 576.0,
        "gpuEfficiency": 0.6276,
    },
    "namespaces": [
        {
            "namespace": "team-vision",
            "gpuHours": 288.0,
            "gpuCost": 273.6,
            "gpuCostIdle": 61.56,
            "gpuEfficiency": 0.775,
        },
        {
            "namespace": "team-nlp",
            "gpuHours": 192.0,
            "gpuCost": 182.4,
            "gpuCostIdle": 108.25,
            "gpuEfficiency": 0.4065,
        },
    ],
    "teams": [
        {"team": "vision", "gpuHours": 288.0, "gpuCost": 273.6, "gpuCostIdle": 61.56, "gpuEfficiency": 0.775}
    ],
    "idle_attribution": [
        {
            "namespace": "team-nlp",
            "category": "memory-bound",
            "status": "measured",
            "gpuHours": 40.5,
            "cost": 38.48,
            "evidence": "DRAM active 0.81 while engine active 0.12",
            "candidates": [],
        }
    ],
    "savings": {
        "estimate": True,
        "method": "waste per hour before vs after each kept change, over 6 h each side",
        "window_hours": 6,
        "gpuHours": 12.5,
        "cost": 11.88,
        "changes": [
            {
                "node": CHANGED_NODE,
                "rollout_id": 1,
                "status": "estimated",
                "savedGpuHours": 12.5,
                "savedCost": 11.88,
            }
        ],
    },
    "forecast_accuracy": {
        "method": "realised mean engine activity over each horizon",
        "forecast_sets": 3,
        "champion": {
            "predictors": ["champion v7"],
            "count": 120,
            "mae_p50": 0.061,
            "under_provisioning_rate": 0.08,
        },
        "by_predictor": [
            {"predictor": "champion v7", "count": 120, "mae_p50": 0.061, "under_provisioning_rate": 0.08},
            {"predictor": "seasonal_naive", "count": 120, "mae_p50": 0.094, "under_provisioning_rate": 0.21},
        ],
    },
    "changes": 1,
    "rollbacks": 1,
    "failed_rollouts": 0,
    "price_sources": [
        {
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
            "price_per_gpu_hour": 0.95,
            "price_source": "default",
            "gpuHours": 8.0,
        }
    ],
    "notes": ["Prices: on-demand list prices; unknown models at the default 0.95 USD per GPU-hour."],
    "files": {"report": "report.html", "allocation": "allocation.csv", "summary": "summary.json"},
    "generated_at": "2026-11-29T00:16:02+00:00",
}


@cache
def _plot(title: str, values: tuple[float, ...]) -> str:
    """A small real PNG chart as a data URI (what a self-contained report embeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 2.5), dpi=80)
    axes.bar(range(len(values)), values, color=["#017cee", "#f59e0b", "#10b981", "#ef4444"][: len(values)])
    axes.set_title(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def report_html(summary: dict[str, Any]) -> str:
    totals = summary["totals"]
    allocated = _plot(
        "allocated vs used vs idle",
        (totals["allocatedGpuHours"], totals["usedGpuHours"], totals["allocatedIdleGpuHours"]),
    )
    by_namespace = _plot("cost by namespace", tuple(n["gpuCost"] for n in summary["namespaces"]))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>GPU cost report</title></head><body>"
        f"<h1>GPU cost report {summary['date']}</h1>"
        f"<table class='totals'><tr><th>gpuCost</th><td>{totals['gpuCost']}</td></tr></table>"
        f"<img alt='allocated vs used vs idle' src='{allocated}'><img alt='cost by namespace' src='{by_namespace}'>"
        "</body></html>"
    )


def write_report(store: Path, date: str = REPORT_DATE, summary: dict[str, Any] | None = None) -> Path:
    summary = {**(summary or SUMMARY), "date": date}
    folder = store / "reports" / date
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=1))
    (folder / "report.html").write_text(report_html(summary))
    (folder / "allocation.csv").write_text(
        "window,namespace,gpuHours,gpuCost\n2026-11-28,team-vision,288,273.6\n"
    )
    return folder


def _node_plan(node: str, model: str, action: str, current: str, desired: str, gain: float) -> NodePlan:
    return NodePlan(
        node=node,
        gpu_model=model,
        gpus=4,
        current=DesiredState(current, "default"),
        desired=DesiredState(desired, "default"),
        action=action,
        policy="packing",
        rule="smaller slices fit the forecast" if action == CHANGE else "layout fits the forecast",
        reasons=("P90 load 31% on 7 slices",),
        util_p50=0.22,
        util_upper=0.31,
        gain_gpu_hours=gain,
    )


PLAN = FleetPlan(
    policy="packing",
    predictor="champion v7",
    trusted=True,
    horizon_minutes=60,
    nodes=(
        _node_plan("sim-h100-0", "NVIDIA-H100-80GB-HBM3", CHANGE, "all-disabled", "all-1g.10gb", 1.75),
        _node_plan("sim-a100-40-0", "NVIDIA-A100-SXM4-40GB", KEEP, "all-1g.5gb", "all-1g.5gb", 0.0),
    ),
    notes=("forecaster trusted: champion v7 beats the best baseline",),
)


def write_plan(store: Path) -> None:
    from slicewise.planning import storage
    from slicewise.store import storage_path

    root = storage_path(store.as_uri())
    storage.write_plan(storage.run_folder(root, PLAN_RUN), PLAN)
    storage.mark_latest(root, PLAN_RUN, NOW - timedelta(minutes=55))


@dataclass(frozen=True)
class LedgerRollouts:
    promoted: int
    rolled_back: int


def write_ledger(url: str, cluster: str) -> LedgerRollouts:
    """One promoted rollout that changed CHANGED_NODE (with a measurement), one that was rolled back, and a run
    that changed nothing but a standby taint (a mark, no rollout)."""
    from slicewise.rollout import ledger as L

    desired = {CHANGED_NODE: {MIG_CONFIG_LABEL: "all-balanced"}}
    with L.Ledger.open(url) as ledger:
        t0 = NOW - timedelta(hours=5)
        first = ledger.start_rollout(
            cluster, "gpu_partition_rollout/run-1", "/plans/run-1", [[CHANGED_NODE]], desired, t0
        )
        ledger.record_snapshot(first.id, CHANGED_NODE, {"labels": {MIG_CONFIG_LABEL: "all-disabled"}}, t0)
        ledger.update_node(
            first.id, CHANGED_NODE, step="verified", status=L.NodeStatus.DONE, now=t0 + timedelta(minutes=4)
        )
        ledger.add_measurement(
            first.id, 0, "gpu-utilisation", CHANGED_NODE, "Successful", 0.71, "", t0 + timedelta(minutes=10)
        )
        ledger.set_wave_status(first.id, 0, L.WaveStatus.PASSED, t0 + timedelta(minutes=11))
        ledger.set_rollout_status(
            first.id, L.RolloutStatus.PROMOTED, "every wave passed", t0 + timedelta(minutes=11)
        )

        t1 = NOW - timedelta(hours=2)
        desired_h100 = {"sim-h100-0": {MIG_CONFIG_LABEL: "all-1g.10gb"}}
        second = ledger.start_rollout(
            cluster, "gpu_partition_rollout/run-2", "/plans/run-2", [["sim-h100-0"]], desired_h100, t1
        )
        ledger.update_node(
            second.id, "sim-h100-0", status=L.NodeStatus.FAILED, detail="mig.config.state failed", now=t1
        )
        ledger.add_measurement(
            second.id, 0, "pending-gpu-requests", "", "Failed", float("nan"), "no data", t1
        )
        ledger.set_rollout_status(
            second.id, L.RolloutStatus.ROLLING_BACK, "canary failed", t1 + timedelta(minutes=1)
        )
        ledger.set_rollout_status(
            second.id, L.RolloutStatus.ROLLED_BACK, "restored the snapshot", t1 + timedelta(minutes=3)
        )
        ledger.add_marks(
            cluster,
            "gpu_partition_rollout/run-3",
            [("standby", STANDBY_MARK)],
            NOW - timedelta(hours=1),
        )
    return LedgerRollouts(first.id, second.id)


def write_cluster(state: Path, changed_at: datetime) -> None:
    """The default simulated fleet, with CHANGED_NODE annotated as changed at ``changed_at``."""
    from slicewise.simulator.cluster import SimulatedCluster

    cluster = SimulatedCluster.open(state)
    cluster.set_annotations(CHANGED_NODE, {LAST_CHANGE_ANNOTATION: changed_at.isoformat()})


REVIEW_FOLDER = "2026-11-16T00_2026-11-23T00"
#: The fields of a what-if review's ``summary.json`` the page reads (tests/unit/whatif/test_steps.py checks
#: that gpu_whatif_review writes them).
REVIEW: dict[str, Any] = {
    "window": {"since": "2026-11-16T00:00:00+00:00", "until": "2026-11-23T00:00:00+00:00"},
    "hours": {"read": 166, "missing_or_quarantined": 2},
    "trace": {"pods": 812, "nodes": 6},
    "model": {"scheduler": "spread", "scale_down_unneeded_s": 600.0, "shared_node_group": True},
    "setup_choice": [
        "the hourly decisions: packing waits 41 s, -88.3% against static-shared (350 s: the node group shared by MPS "
        "without a planner; static 912 s); paid GPU-hours 3,950, -1.2% against static-shared's 3,998"
    ],
    "consolidation_choice": [
        "packing: least wait with planner_consolidation=whole-gpus (41 s), fewest node-GPU-hours with nodes (3,310)"
    ],
    "standby_choice": [
        "packing with standby on (the setting): 41 s mean wait, 3,402 node-GPU-hours; standby off: 39 s (-4.9%), "
        "3,655 node-GPU-hours (+7.4%)"
    ],
    "whole_gpu_demand_choice": [
        "packing with whole GPUs for median (the setting): 41 s mean wait, 3,402 node-GPU-hours; whole GPUs for "
        "pending-now: 37 s (-9.8%), 3,410 node-GPU-hours (+0.2%)"
    ],
    "mps_release_choice": [
        "packing with MPS release below 0.25 (the setting): 41 s mean wait, 3,402 node-GPU-hours; MPS release "
        "below 1: 52 s (+26.8%), 3,398 node-GPU-hours (-0.1%); paid GPU-hours 3,950 with the setting, 3,921 (-0.7%)"
    ],
    "policies": {
        "static": {
            "wait_mean_s": 912.4,
            "wait_cut_vs_static": 0.0,
            "node_gpu_hours": 4032.0,
            "node_gpu_hours_cut_vs_static": 0.0,
            "pods_evicted": 0,
            "still_waiting": 0,
        },
        "packing/whole-gpus": {
            "wait_mean_s": 41.2,
            "wait_cut_vs_static": 0.9548,
            "node_gpu_hours": 3950.0,
            "node_gpu_hours_cut_vs_static": 0.0203,
            "pods_evicted": 12,
            "still_waiting": 0,
        },
        "packing/nodes": {
            "wait_mean_s": 77.0,
            "wait_cut_vs_static": 0.9156,
            "node_gpu_hours": 3310.0,
            "node_gpu_hours_cut_vs_static": 0.1791,
            "service_gpu_hours": 3402.4,
            "paid": {"requested": 2900.2, "slot_slack": 60.1, "free_in_use": 349.7, "no_pods": 92.4},
            "pods_evicted": 40,
            "still_waiting": 0,
        },
    },
}


def write_review(store: Path) -> Path:
    """A published what-if review as gpu_whatif_review leaves it (manifest, summary.json, report.html)."""
    folder = store / "whatif" / REVIEW_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(REVIEW, indent=1))
    (folder / "report.html").write_text("<!doctype html><html><body><h1>What-if backtest</h1></body></html>")
    (folder / "_MANIFEST.json").write_text(json.dumps({"window": REVIEW["window"]}))
    return folder
