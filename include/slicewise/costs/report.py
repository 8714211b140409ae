"""The report's data files: ``summary.json`` (what the Airflow UI plugin reads) and ``allocation.csv``; the
HTML page is :mod:`slicewise.costs.page`. Pure: every function takes computed results and returns plain data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slicewise.costs import allocation
from slicewise.costs.samples import GPU_UTIL, MPS, NO_WORKLOAD, NOT_MEASURED

if TYPE_CHECKING:
    import pandas as pd

    from slicewise.costs.pricing import PriceTable
    from slicewise.costs.savings import RolloutCounts
    from slicewise.costs.window import ReportWindow

SUMMARY, ALLOCATION_CSV, REPORT_HTML = "summary.json", "allocation.csv", "report.html"
NAMESPACE_FIELDS = (
    "gpuHours",
    "usedGpuHours",
    "idleGpuHours",
    "unmeasuredGpuHours",
    "gpuCost",
    "gpuCostIdle",
)


def _finite(value: Any) -> Any:
    """JSON has no NaN: a missing number is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(frame: pd.DataFrame, fields: Sequence[str]) -> list[dict[str, Any]]:
    return [{f: _finite(_plain(getattr(r, f))) for f in fields} for r in frame.itertuples(index=False)]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def build_summary(
    *,
    window: ReportWindow,
    rows: pd.DataFrame,
    capacity_gpu_hours: float,
    published: Sequence[str],
    prices: PriceTable,
    mig_share: str,
    idle: Sequence[Mapping[str, Any]],
    savings: Mapping[str, Any],
    accuracy: Mapping[str, Any],
    counts: RolloutCounts,
    generated_at: str,
    extra_notes: Sequence[str] = (),
) -> dict[str, Any]:
    """``summary.json``: the keys the UI plugin reads (docs/costs.md) plus the method notes."""
    base = allocation.totals(rows)
    measured = base["gpuHours"] - base["unallocatedGpuHours"] - _unmeasured_tenant_hours(rows)
    tenant_used = float(rows.loc[rows["namespace"] != NO_WORKLOAD, "usedGpuHours"].sum())
    totals: dict[str, float | None] = {
        **base,
        "capacityGpuHours": capacity_gpu_hours,
        "gpuEfficiency": tenant_used / measured if measured > 1e-12 else None,
    }
    namespaces = allocation.by_namespace(rows)
    teams = allocation.by_namespace(rows, key="team")
    price_sources: list[dict[str, Any]] = []
    if not rows.empty:
        by_price = rows.groupby(["gpu_model", "price_per_gpu_hour", "price_source"], as_index=False).agg(
            gpuHours=("gpuHours", "sum")
        )
        price_sources = _records(by_price, ("gpu_model", "price_per_gpu_hour", "price_source", "gpuHours"))
    return {
        "date": window.day.isoformat(),
        "partial": window.partial,
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "hours": {
            "in_window": len(window.hours),
            "published": len(published),
            "missing": [h.isoformat() for h in window.hours if h.isoformat() not in set(published)],
        },
        "currency": prices.currency,
        "default_price_per_gpu_hour": prices.default_price,
        "cost_mig_share": mig_share,
        "totals": {k: _finite(v) for k, v in totals.items()},
        "namespaces": _records(namespaces, ("namespace", *NAMESPACE_FIELDS, "gpuEfficiency")),
        "teams": _records(teams, ("team", *NAMESPACE_FIELDS, "gpuEfficiency")),
        "idle_attribution": [{k: _finite(v) for k, v in f.items()} for f in idle],
        "savings": json_safe(savings),
        "forecast_accuracy": json_safe(accuracy),
        "changes": counts.changes,
        "rollbacks": counts.rollbacks,
        "failed_rollouts": counts.failed,
        "price_sources": price_sources,
        "notes": notes(window, rows, base, capacity_gpu_hours, mig_share, published, extra_notes),
        "files": {"report": REPORT_HTML, "allocation": ALLOCATION_CSV, "summary": SUMMARY},
        "generated_at": generated_at,
    }


def _unmeasured_tenant_hours(rows: pd.DataFrame) -> float:
    return float(rows.loc[rows["namespace"] != NO_WORKLOAD, "unmeasuredGpuHours"].sum())


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as None and numpy scalars as Python ones (JSON has neither)."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return _finite(_plain(value))


def notes(
    window: ReportWindow,
    rows: pd.DataFrame,
    totals: Mapping[str, float],
    capacity: float,
    mig_share: str,
    published: Sequence[str],
    extra: Sequence[str],
) -> list[str]:
    """What a reader must know to trust the numbers: method choices, estimates, gaps."""
    out = []
    if window.partial:
        out.append(f"partial report: the day so far, until {window.end:%H:%M} UTC; the daily run replaces it")
    missing = len(window.hours) - len(published)
    if missing:
        out.append(
            f"{missing} of {len(window.hours)} hours have no validated metrics partition and are not counted"
        )
    share = (
        "compute slices / the GPU's compute slices (7; 4 on A30)"
        if mig_share == "compute"
        else ("memory slices / the GPU's memory slices (8; 4 on A30)")
    )
    out.append(f"a MIG slice counts {share} of a GPU (setting cost_mig_share={mig_share})")
    out.append(
        "capacity nobody requested (idle MIG instances, slices no instance covers, whole GPUs without a pod, "
        "unrequested MPS replicas) is the line __idle__, as OpenCost names capacity no workload holds"
    )
    if not rows.empty and (rows["sharing"] == MPS).any():
        methods = sorted(set(rows.loc[rows["sharing"] == MPS, "replicas_method"]))
        out.append(
            "MPS tenants: DCGM cannot attribute a shared GPU to pods, so each tenant's used GPU-hours are the "
            "node's measured activity split by the tenants' shares (usage_estimate=true); replicas from "
            + ", ".join(methods)
        )
    if not rows.empty:
        inferred = rows[
            rows["replicas_method"].isin(("demand", "default")) & rows["sharing"].isin(("whole", MPS))
        ]
        for node, method in sorted(set(zip(inferred["node"], inferred["replicas_method"], strict=True))):
            out.append(f"{node}: MPS replicas not in the layout history, {method} used (see replicas_method)")
        if rows["usage_method"].str.contains(GPU_UTIL, regex=False).any():
            out.append("some whole GPUs had no profiling metrics: their usage is DCGM_FI_DEV_GPU_UTIL / 100")
        if rows["usage_method"].str.contains(NOT_MEASURED, regex=False).any():
            out.append(
                f"{totals['unmeasuredGpuHours']:.2f} GPU-h had no activity metric: counted as allocated, "
                "neither used nor idle (unmeasuredGpuHours)"
            )
    allocated = totals["gpuHours"]
    out.append(
        f"reconciliation: {capacity:.3f} GPU-h of physical GPUs seen by DCGM; {allocated:.3f} GPU-h allocated "
        "to namespaces and __idle__"
    )
    out.extend(extra)
    return out


def allocation_csv(rows: pd.DataFrame) -> str:
    """``allocation.csv``: one row per hour and pod (and ``__idle__`` line), ``allocation.COLUMNS``."""
    return str(rows[list(allocation.COLUMNS)].to_csv(index=False, float_format="%.6f"))
