"""Allocation rows: GPU-hours, usage, idle and money per hour and pod, named as OpenCost names them.

One row per (hour, node, GPU model, sharing kind, resource, namespace, pod, container) of the sample table
(:mod:`slicewise.costs.samples`). Column names follow OpenCost's allocation API where they mean the same thing
(opencost ``pkg/costmodel/aggregation.go``: ``name``, ``window``, ``start``, ``end``, ``minutes``, ``gpuCount``,
``gpuRequestAverage``, ``gpuUsageAverage``, ``gpuHours``, ``gpuCost``, ``gpuCostIdle``, ``gpuEfficiency``), so
the two can be joined; the rest are Slicewise's. Per row, always:
``gpuHours = usedGpuHours + idleGpuHours + unmeasuredGpuHours``. Capacity nobody requested is its own row named
``__idle__``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise.costs.pricing import PriceTable
from slicewise.costs.samples import MPS, NO_WORKLOAD
from slicewise.costs.sharing import LayoutHistory

if TYPE_CHECKING:
    import pandas as pd

KEY = ("hour", "node", "gpu_model", "kind", "resource", "namespace", "pod", "container")

#: allocation.csv columns, in order.
COLUMNS = (
    "name",
    "window",
    "start",
    "end",
    "minutes",
    "namespace",
    "team",
    "pod",
    "container",
    "node",
    "gpu_model",
    "resource",
    "sharing",
    "share",
    "mps_replicas",
    "replicas_method",
    "gpuCount",
    "gpuRequestAverage",
    "gpuUsageAverage",
    "gpuHours",
    "usedGpuHours",
    "idleGpuHours",
    "unmeasuredGpuHours",
    "gpuCost",
    "gpuCostIdle",
    "gpuEfficiency",
    "price_per_gpu_hour",
    "price_source",
    "usage_method",
    "usage_estimate",
)


def team_map(raw: str) -> dict[str, str]:
    """The setting ``cost_team_map`` (a JSON object namespace -> team); SettingsError when it is not one."""
    from slicewise.settings import SettingsError

    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise SettingsError(f"cost_team_map is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise SettingsError("cost_team_map must be a JSON object of namespace -> team name")
    return {str(k): v for k, v in parsed.items()}


def allocation_rows(
    samples: pd.DataFrame,
    *,
    prices: PriceTable,
    history: LayoutHistory,
    teams: Mapping[str, str] | None = None,
    step_s: int = 60,
) -> pd.DataFrame:
    """Sum the sample table into allocation rows (``COLUMNS``), priced per node and hour."""
    import pandas as pd

    if samples.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
    teams = teams or {}
    grouped = samples.groupby(list(KEY), dropna=False, sort=True)
    rows = grouped.agg(
        samples=("timestamp", "nunique"),
        share=("share", "mean"),
        gpuHours=("alloc", "sum"),
        usedGpuHours=("used", "sum"),
        unmeasuredGpuHours=("unmeasured", "sum"),
        mps_replicas=("replicas", "first"),
        replicas_method=("replicas_method", "first"),
        usage_method=("usage_method", lambda s: "+".join(sorted(set(s)))),
    ).reset_index()
    # Sums of shares like 1/7 leave float dust; a GPU-hour below 1e-12 (a few nanoseconds) is zero.
    for column in ("usedGpuHours", "unmeasuredGpuHours"):
        rows[column] = rows[column].where(rows[column].abs() > 1e-12, 0.0)
    rows["idleGpuHours"] = (rows["gpuHours"] - rows["usedGpuHours"] - rows["unmeasuredGpuHours"]).clip(
        lower=0.0
    )
    rows["minutes"] = rows["samples"] * step_s / 60.0
    hours_held = rows["minutes"] / 60.0
    rows["gpuRequestAverage"] = rows["gpuHours"] / hours_held
    rows["gpuCount"] = rows["gpuRequestAverage"]
    measured = rows["gpuHours"] - rows["unmeasuredGpuHours"]
    rows["gpuUsageAverage"] = np.where(measured > 0, rows["usedGpuHours"] / hours_held, np.nan)
    rows["gpuEfficiency"] = np.where(
        measured > 1e-12, rows["usedGpuHours"] / measured.where(measured > 0, 1), np.nan
    )

    prices_at = _prices(rows, prices, history)
    rows["price_per_gpu_hour"] = [prices_at[(n, h, m)][0] for n, h, m in _price_keys(rows)]
    rows["price_source"] = [prices_at[(n, h, m)][1] for n, h, m in _price_keys(rows)]
    rows["gpuCost"] = rows["gpuHours"] * rows["price_per_gpu_hour"]
    rows["gpuCostIdle"] = rows["idleGpuHours"] * rows["price_per_gpu_hour"]

    rows["start"] = rows["hour"].map(_iso)
    rows["end"] = (rows["hour"] + pd.Timedelta(hours=1)).map(_iso)
    rows["window"] = rows["start"] + "," + rows["end"]
    unallocated = rows["namespace"] == NO_WORKLOAD
    rows["name"] = np.where(
        unallocated, NO_WORKLOAD, rows["namespace"] + "/" + rows["pod"] + "/" + rows["container"]
    )
    rows["team"] = [NO_WORKLOAD if n == NO_WORKLOAD else teams.get(n, n) for n in rows["namespace"]]
    rows["sharing"] = rows["kind"]
    rows["usage_estimate"] = rows["kind"] == MPS
    rows.loc[rows["kind"].isin(("mig", "uncovered")), "mps_replicas"] = np.nan
    return rows[list(COLUMNS)].reset_index(drop=True)


def _iso(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _price_keys(rows: pd.DataFrame) -> list[tuple[str, Any, str]]:
    return list(zip(rows["node"], rows["hour"], rows["gpu_model"], strict=True))


def _prices(
    rows: pd.DataFrame, prices: PriceTable, history: LayoutHistory
) -> dict[tuple[str, Any, str], tuple[float, str]]:
    out: dict[tuple[str, Any, str], tuple[float, str]] = {}
    for node, hour, model in set(_price_keys(rows)):
        known = history.at(node, hour.to_pydatetime())
        price = prices.price_for(model, known.labels if known else None)
        out[(node, hour, model)] = (price.per_gpu_hour, price.source)
    return out


# -- summaries ----------------------------------------------------------------------------------------------
SUMMED = ("gpuHours", "usedGpuHours", "idleGpuHours", "unmeasuredGpuHours", "gpuCost", "gpuCostIdle")


def totals(rows: pd.DataFrame) -> dict[str, float]:
    """Cluster totals in GPU-hours and money. ``gpuHours`` is all capacity (= used + idle + not measured);
    ``idleGpuHours`` includes the unallocated capacity, of which ``unallocated*`` is the part nobody
    requested; ``allocated*`` is what workloads held."""
    unallocated = rows[rows["namespace"] == NO_WORKLOAD]
    held = rows[rows["namespace"] != NO_WORKLOAD]
    out = {k: float(rows[k].sum()) for k in SUMMED}
    out["unallocatedGpuHours"] = float(unallocated["gpuHours"].sum())
    out["unallocatedCost"] = float(unallocated["gpuCost"].sum())
    out["allocatedGpuHours"] = float(held["gpuHours"].sum())
    out["allocatedIdleGpuHours"] = float(held["idleGpuHours"].sum())
    out["allocatedCostIdle"] = float(held["gpuCostIdle"].sum())
    return out


def by_namespace(rows: pd.DataFrame, key: str = "namespace") -> pd.DataFrame:
    """Per namespace (or ``team``): summed hours and money, and efficiency = used / measured allocated hours."""
    import pandas as pd

    if rows.empty:
        return pd.DataFrame(columns=[key, *SUMMED, "gpuEfficiency"])
    out = rows.groupby(key, as_index=False)[list(SUMMED)].sum()
    measured = out["gpuHours"] - out["unmeasuredGpuHours"]
    out["gpuEfficiency"] = np.where(
        measured > 1e-12, out["usedGpuHours"] / measured.where(measured > 0, 1), np.nan
    )
    # Capacity nobody requested has no efficiency (its used hours, if any, are activity without a pod).
    out.loc[out[key] == NO_WORKLOAD, "gpuEfficiency"] = np.nan
    # Namespaces by cost, the unallocated line last.
    out["_last"] = out[key] == NO_WORKLOAD
    return out.sort_values(["_last", "gpuCost"], ascending=[True, False]).drop(columns="_last")


def physical_gpu_hours(gpu: pd.DataFrame, step_s: int = 60) -> float:
    """GPU-hours of the physical GPUs DCGM saw in a GPU frame (each (node, GPU, timestamp) once), counted
    independently of the allocation: the reconciliation's other side."""
    if gpu.empty:
        return 0.0
    seen = gpu[["hostname", "gpu", "timestamp"]].drop_duplicates()
    return len(seen) * step_s / 3600.0
