"""The backtest's outputs: the ``--json`` object, a text table, and a self-contained HTML page with plots."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from slicewise.costs.page import table
from slicewise.costs.plots import new_figure, png_base64

if TYPE_CHECKING:
    from slicewise.whatif.metrics import PolicyResult
    from slicewise.whatif.run import Backtest

COLUMNS = (
    ("gpu_utilisation", "GPU util", "{:.1%}"),
    ("pending_mean_s", "pending mean s", "{:,.0f}"),
    ("pending_p95_s", "pending P95 s", "{:,.0f}"),
    ("fragmentation", "fragmentation", "{:.1%}"),
    ("reconfigs_per_node_hour", "reconfigs/node/h", "{:.4f}"),
    ("pods_evicted", "evicted", "{:,}"),
    ("gpu_hours", "GPU-hours", "{:,.0f}"),
    ("cost", "cost", "{:,.0f}"),
)


def as_json(backtest: Backtest) -> dict[str, Any]:
    gains = backtest.gains()
    return {
        "policies": {
            name: {**result.headline(), **{k: _round(v) for k, v in gains[name].items()}}
            for name, result in backtest.results.items()
        },
        "trace": {
            "pods_file": str(backtest.pods),
            "nodes_file": str(backtest.nodes),
            "pods": len(backtest.trace.pods),
            "nodes": len(backtest.fleet),
            "gpus": sum(n.gpus for n in backtest.fleet),
            "window_s": list(backtest.window),
            "notes": list(backtest.trace.notes),
        },
        "model": {
            "gpu_model": backtest.config.gpu_model,
            "reconfigure_s": backtest.config.reconfigure_s,
            "price_per_gpu_hour": backtest.config.price_per_gpu_hour,
            "planner": {
                "min_gain_gpu_hours": backtest.config.planner.min_gain_gpu_hours,
                "dwell_hours": backtest.config.planner.dwell_hours,
                "max_change_share": backtest.config.planner.max_change_share,
            },
        },
        "seconds": round(backtest.seconds, 1),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


GAIN_COLUMNS = {
    "utilisation_points": "util vs static",
    "pending_cut": "pending cut",
    "gpu_hours_cut": "GPU-h cut",
}


def _gain(gains: dict[str, float | None], metric: str) -> str:
    mine, share = gains[f"{metric}_vs_static"], gains[f"{metric}_share_of_oracle"]
    if mine is None:
        return "-"
    text = f"{mine * 100:+.1f} pt" if metric == "utilisation_points" else f"{mine:+.1%}"
    return text + ("" if share is None else f" ({share:.0%} of oracle)")


def _rows(backtest: Backtest) -> list[list[str]]:
    gains = backtest.gains()
    rows = []
    for name, result in backtest.results.items():
        values = result.headline()
        rows.append(
            [
                name,
                *(fmt.format(values[key]) for key, _, fmt in COLUMNS),
                *(_gain(gains[name], metric) for metric in GAIN_COLUMNS),
            ]
        )
    return rows


def text_table(backtest: Backtest) -> str:
    rows = [["policy", *(label for _, label, _ in COLUMNS), *GAIN_COLUMNS.values()], *_rows(backtest)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def _over_time(
    results: dict[str, PolicyResult], field: str, title: str, ylabel: str, log: bool = False
) -> str | None:
    if not any(r.hours for r in results.values()):
        return None
    figure = new_figure(10, 3.2)
    axes = figure.subplots()
    for name, result in results.items():
        days = [h.start_s / 86_400 for h in result.hours]
        axes.plot(days, [getattr(h, field) for h in result.hours], label=name, linewidth=0.9)
    axes.set_title(title)
    axes.set_xlabel("day of the trace")
    axes.set_ylabel(ylabel)
    if log:  # a starving policy's queue dwarfs the others' by orders of magnitude
        axes.set_yscale("symlog")
    axes.legend(fontsize="small", ncols=3)
    return png_base64(figure)


def render_html(backtest: Backtest) -> str:
    data = as_json(backtest)
    rows = _rows(backtest)
    headers = [
        "policy",
        *(label for _, label, _ in COLUMNS),
        *GAIN_COLUMNS.values(),
    ]
    plots = [
        _over_time(backtest.results, "utilisation", "Utilisation of the GPUs in use (hourly)", "fraction"),
        _over_time(backtest.results, "gpus_in_use", "GPUs of the nodes hosting pods (hourly mean)", "GPUs"),
        _over_time(backtest.results, "waiting", "Pods waiting (hourly mean, log scale)", "pods", log=True),
        _over_time(backtest.results, "reconfigs", "Reconfigurations per hour", "nodes"),
    ]
    images = "".join(f"<img alt='plot' src='data:image/png;base64,{p}'>" for p in plots if p)
    trace = data["trace"]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in trace["notes"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Slicewise what-if backtest</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px}}td.num{{text-align:right}}img{{display:block;margin:1em 0}}</style>
</head><body>
<h1>What-if backtest</h1>
<p>{html.escape(trace["pods_file"])}: {trace["pods"]:,} GPU pods on {trace["nodes"]:,} nodes
({trace["gpus"]:,} GPUs, modelled as {html.escape(data["model"]["gpu_model"])}), reconfiguration
{data["model"]["reconfigure_s"]:.0f} s, price {data["model"]["price_per_gpu_hour"]:.2f} per GPU-hour.
Ran in {data["seconds"]:.0f} s on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.</p>
<ul>{notes}</ul>
{table(headers, rows)}
<p>What each figure means, the scheduler model and the policies: README, "What-if backtest".</p>
{images}
</body></html>
"""
