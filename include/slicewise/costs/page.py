"""``report.html``: one self-contained page of tables and base64 PNG plots (no external assets), rendered from
``summary.json``'s content, the allocation rows and the plots. Pure: text in, text out."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5rem;color:#212529;max-width:1200px}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #dee2e6}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
th,td{border:1px solid #dee2e6;padding:.25rem .5rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f1f3f5}
.note{color:#495057;font-size:.85rem}.badge{background:#fff3bf;padding:.1rem .4rem;border-radius:.25rem}
img{max-width:100%;display:block;margin:.5rem 0}
"""


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "<td class='n'>&ndash;</td>"
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int | float):
        return (
            f"<td class='n'>{value:,.2f}</td>" if isinstance(value, float) else f"<td class='n'>{value}</td>"
        )
    return f"<td>{html.escape(str(value))}</td>"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table; numbers right-aligned with two decimals, text escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(png: str | None, alt: str, missing: str) -> str:
    if png is None:
        return f"<p class='note'>{html.escape(missing)}</p>"
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{png}'>"


def _percent(value: Any) -> str | None:
    return None if value is None else f"{value:.1%}"


def render_html(summary: Mapping[str, Any], rows: pd.DataFrame, plots: Mapping[str, str | None]) -> str:
    """The self-contained HTML report of a summary, its allocation rows and the plots (base64 PNGs)."""
    currency = summary["currency"]
    t = summary["totals"]
    title = f"GPU cost report {summary['date']}" + (
        " (partial: the day so far)" if summary["partial"] else ""
    )
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='note'>Window {summary['window']['start']} &ndash; {summary['window']['end']}; "
        f"{summary['hours']['published']} of {summary['hours']['in_window']} hours validated; "
        f"generated {html.escape(summary['generated_at'])}. Money in {html.escape(currency)} per the price table "
        f"(default {summary['default_price_per_gpu_hour']:.2f}/GPU-h when a model has no price).</p>",
        "<h2>Totals</h2>",
        table(
            ["", "GPU-hours", f"cost ({currency})"],
            [
                ["capacity (allocated + unallocated)", t["gpuHours"], t["gpuCost"]],
                ["allocated to workloads", t["allocatedGpuHours"], None],
                ["used", t["usedGpuHours"], None],
                ["idle while allocated", t["allocatedIdleGpuHours"], t["allocatedCostIdle"]],
                ["unallocated (nobody requested it)", t["unallocatedGpuHours"], t["unallocatedCost"]],
                ["idle in all (allocated idle + unallocated unused)", t["idleGpuHours"], t["gpuCostIdle"]],
                ["not measured", t["unmeasuredGpuHours"], None],
            ],
        ),
        f"<p>Efficiency of allocated GPUs (used / allocated, measured): <b>{_percent(t['gpuEfficiency']) or '-'}</b>. "
        f"Changes applied: <b>{summary['changes']}</b>; rollouts rolled back: <b>{summary['rollbacks']}</b>.</p>",
        "<h2>By namespace</h2>",
        table(
            [
                "namespace",
                "GPU-h",
                "used GPU-h",
                "idle GPU-h",
                "not measured GPU-h",
                "cost",
                "idle cost",
                "efficiency",
            ],
            [
                [
                    n["namespace"],
                    n["gpuHours"],
                    n["usedGpuHours"],
                    n["idleGpuHours"],
                    n["unmeasuredGpuHours"],
                    n["gpuCost"],
                    n["gpuCostIdle"],
                    _percent(n["gpuEfficiency"]),
                ]
                for n in summary["namespaces"]
            ],
        ),
        _image(plots.get("cost_over_time"), "Cost by namespace over time", "no allocation to plot"),
        _image(plots.get("allocated_used_idle"), "Allocated vs used vs idle", "no allocation to plot"),
        "<h2>Where idle time went</h2>",
        "<p class='note'>Each category per namespace with its evidence; “not measured” means the DCGM metric "
        "it needs is missing or cannot be attributed to the namespace's pods — never a guess.</p>",
        table(
            ["namespace", "category", "status", "GPU-h", "cost", "evidence"],
            [
                [f["namespace"], f["category"], f["status"], f["gpuHours"], f["cost"], f["evidence"]]
                for f in summary["idle_attribution"]
            ],
        ),
        _savings_html(summary, plots.get("savings")),
        _accuracy_html(summary["forecast_accuracy"], plots.get("forecast_vs_actual")),
        "<h2>By node</h2>",
        _nodes_html(rows),
        "<h2>Prices</h2>",
        table(
            ["GPU model", f"{currency}/GPU-h", "source", "GPU-h"],
            [
                [p["gpu_model"], f"{p['price_per_gpu_hour']:.4f}", p["price_source"], p["gpuHours"]]
                for p in summary["price_sources"]
            ],
        ),
        "<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in summary["notes"]) + "</ul>",
        "<p class='note'>Per-pod rows: allocation.csv (OpenCost's allocation field names where they mean "
        "the same).</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _savings_html(summary: Mapping[str, Any], png: str | None) -> str:
    s = summary["savings"]
    rows = [
        [
            c["rollout_id"],
            c["node"],
            c["changed_at"],
            c["change"],
            c["status"],
            c.get("wasteBefore"),
            c.get("wasteAfter"),
            c.get("usedBefore"),
            c.get("usedAfter"),
            c.get("savedGpuHours"),
            c.get("savedCost"),
        ]
        for c in s["changes"]
    ]
    return "\n".join(
        [
            "<h2>Savings from the control loop <span class='badge'>estimate</span></h2>",
            f"<p>Estimated saving over the window: <b>{s['gpuHours']:.2f} GPU-h</b>, "
            f"<b>{s['cost']:.2f} {html.escape(summary['currency'])}</b>.</p>",
            f"<p class='note'>Method: {html.escape(s['method'])}</p>",
            table(
                [
                    "rollout",
                    "node",
                    "changed at",
                    "change",
                    "status",
                    "waste/h before",
                    "waste/h after",
                    "used/h before",
                    "used/h after",
                    "saved GPU-h",
                    "saved cost",
                ],
                rows,
            )
            if rows
            else "<p class='note'>No change was applied and kept in this window.</p>",
            _image(png, "Savings per applied change", ""),
        ]
    )


def _accuracy_html(accuracy: Mapping[str, Any], png: str | None) -> str:
    rows = [
        [
            p["predictor"],
            p["forecast_sets"],
            p["count"],
            p["without_actuals"],
            p["mae_p50"],
            _percent(p["under_provisioning_rate"]),
        ]
        for p in accuracy["by_predictor"]
    ]
    return "\n".join(
        [
            "<h2>Forecast accuracy</h2>",
            f"<p class='note'>Method: {html.escape(accuracy['method'])}</p>",
            table(
                [
                    "predictor",
                    "forecast sets",
                    "series scored",
                    "without actuals",
                    "MAE P50",
                    "P90 under-provisioning",
                ],
                rows,
            )
            if rows
            else "<p class='note'>No plan's forecasts fall in this window.</p>",
            _image(png, "Forecast vs actual", "no forecast with realised data to plot"),
        ]
    )


def _nodes_html(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "<p class='note'>No GPU was seen.</p>"
    grouped = (
        rows.fillna({"mps_replicas": 0})
        .groupby(["node", "gpu_model", "sharing", "mps_replicas", "replicas_method"], as_index=False)[
            ["gpuHours", "usedGpuHours", "idleGpuHours", "gpuCost"]
        ]
        .sum()
    )
    return table(
        ["node", "GPU model", "sharing", "MPS replicas", "replicas from", "GPU-h", "used", "idle", "cost"],
        [
            [
                r["node"],
                r["gpu_model"],
                r["sharing"],
                int(r["mps_replicas"]) or None,
                r["replicas_method"] or None,
                r["gpuHours"],
                r["usedGpuHours"],
                r["idleGpuHours"],
                r["gpuCost"],
            ]
            for r in grouped.to_dict("records")
        ],
    )
