"""The published files: summary.json's keys (the UI plugin reads them), the CSV's columns, the HTML's plots."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pandas as pd
import pytest

from slicewise.costs import allocation, page, plots, report
from slicewise.costs.idle import IdleThresholds, attribute_idle, hour_evidence
from slicewise.costs.pricing import load_prices
from slicewise.costs.samples import hour_samples
from slicewise.costs.savings import RolloutCounts, estimate
from slicewise.costs.sharing import LayoutHistory
from slicewise.costs.window import resolve
from tests.unit.costs.frames import (
    A30,
    CATALOG,
    H100,
    HOUR,
    PRICES,
    balanced_a100,
    demand_frame,
    gpu_frame,
    observed_at,
    requests,
    series,
)

SUMMARY_KEYS = {
    "date", "window", "currency", "default_price_per_gpu_hour", "totals", "namespaces", "savings",
    "forecast_accuracy", "changes", "rollbacks", "price_sources", "notes", "generated_at", "partial",
}  # fmt: skip
TOTALS_KEYS = {
    "gpuHours", "usedGpuHours", "idleGpuHours", "unallocatedGpuHours", "gpuCost", "gpuCostIdle", "unallocatedCost",
}  # fmt: skip


def built() -> tuple[dict[str, object], pd.DataFrame]:
    gpu = pd.concat(
        [
            balanced_a100(),
            gpu_frame(series("s", 0, H100, engine=0.5), series("x", 0, A30, namespace="x", pod="p")),
        ],
        ignore_index=True,
    )
    demand = demand_frame(requests("s", "serve", "t0"), requests("s", "serve", "t1"))
    history = LayoutHistory.of(observed_at(HOUR - timedelta(hours=1), "s", "mps-4"))
    samples = hour_samples(gpu, demand, catalog=CATALOG, history=history)
    rows = allocation.allocation_rows(samples, prices=PRICES, history=history)
    window = resolve(HOUR + timedelta(hours=5), "partial")
    findings = attribute_idle(hour_evidence(samples, IdleThresholds()), rows, IdleThresholds())
    summary = report.build_summary(
        window=window,
        rows=rows,
        capacity_gpu_hours=allocation.physical_gpu_hours(gpu),
        published=[HOUR.isoformat()],
        prices=load_prices(),
        mig_share="compute",
        idle=[f.as_dict() for f in findings],
        savings=estimate([], rows, window.start, window.end),
        accuracy={"method": "m", "forecast_sets": 0, "champion": None, "by_predictor": []},
        counts=RolloutCounts(2, 1),
        generated_at="2026-11-24T15:00:00+00:00",
    )
    return summary, rows


def test_summary_has_the_keys_the_ui_reads_and_is_strict_json() -> None:
    summary, _ = built()
    assert set(summary) >= SUMMARY_KEYS
    assert set(summary["totals"]) >= TOTALS_KEYS  # type: ignore[arg-type]
    text = json.dumps(summary, allow_nan=False)  # NaN would break strict JSON readers
    again = json.loads(text)
    assert again["currency"] == "USD" and again["default_price_per_gpu_hour"] == 0.95
    assert again["partial"] is True and (again["changes"], again["rollbacks"]) == (2, 1)
    assert {"namespace", "gpuHours", "gpuCost", "gpuCostIdle", "gpuEfficiency"} <= set(again["namespaces"][0])
    assert again["namespaces"][-1]["namespace"] == "__idle__"
    assert again["totals"]["gpuHours"] == pytest.approx(3.0) == again["totals"]["capacityGpuHours"]
    assert sum(n["gpuCost"] for n in again["namespaces"]) == pytest.approx(again["totals"]["gpuCost"])
    assert any("A30" in p["price_source"] and p["price_per_gpu_hour"] == 0.95 for p in again["price_sources"])
    notes = " ".join(again["notes"])
    assert "partial report" in notes and "MPS tenants" in notes and "estimate" in notes
    assert "14 of 15 hours have no validated metrics partition" in notes
    assert again["savings"]["estimate"] is True and again["savings"]["method"]


def test_the_html_is_self_contained_with_plots_and_tables_and_the_csv_has_opencost_columns() -> None:
    summary, rows = built()
    figures = {
        "cost_over_time": plots.cost_by_namespace_over_time(rows, "USD"),
        "allocated_used_idle": plots.allocated_used_idle(allocation.by_namespace(rows)),
        "savings": None,
        "forecast_vs_actual": None,
    }
    html = page.render_html(summary, rows, figures)
    assert html.count("src='data:image/png;base64,") == 2
    assert "<table>" in html and "team-a" in html and "__idle__" in html
    assert "No change was applied" in html and "No plan's forecasts fall in this window" in html
    assert "http://" not in html and "https://" not in html  # nothing fetched from elsewhere
    csv = pd.read_csv(io.StringIO(report.allocation_csv(rows)))
    assert tuple(csv.columns) == allocation.COLUMNS
    assert {"gpuHours", "gpuCost", "gpuCostIdle", "gpuEfficiency", "window", "start", "end"} <= set(
        csv.columns
    )
