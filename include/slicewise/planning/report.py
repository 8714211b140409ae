"""The plan as people and programs read it: a text table for the task log, Markdown and HTML pages, a frame."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

from slicewise.planning.types import ACTIONS, FleetPlan, NodePlan

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("node", "GPU model", "current -> desired", "action", "why", "expected gain", "disruption")


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0%}"


def _transition(plan: NodePlan) -> str:
    current, desired = plan.current, plan.desired
    parts = []
    if desired.mig_config != current.mig_config:
        parts.append(f"mig.config {current.mig_config} -> {desired.mig_config}")
    if desired.device_plugin_config != current.device_plugin_config:
        parts.append(f"device-plugin.config {current.device_plugin_config} -> {desired.device_plugin_config}")
    return "; ".join(parts) or f"{current.mig_config}, {current.device_plugin_config} (unchanged)"


def row(plan: NodePlan) -> dict[str, str]:
    """One plan as the strings of the table's columns."""
    return {
        "node": plan.node,
        "GPU model": f"{plan.gpus} x {plan.gpu_model}",
        "current -> desired": _transition(plan),
        "action": plan.action,
        "why": f"{plan.rule}. " + "; ".join(plan.reasons),
        "expected gain": f"{plan.gain_gpu_hours:.2f} GPU-h/h "
        f"(util P50 {_pct(plan.util_p50)}, P90 {_pct(plan.util_upper)})",
        "disruption": f"{len(plan.disruption)} pods: " + ", ".join(plan.disruption)
        if plan.disruption
        else "none",
    }


def headline(plan: FleetPlan) -> str:
    counts = ", ".join(f"{n} {action}" for action, n in plan.counts().items() if n)
    trust = "trusted" if plan.trusted else "NOT trusted"
    return (
        f"policy {plan.policy}, forecaster {plan.predictor} ({trust}), horizon {plan.horizon_minutes} min: "
        f"{counts or 'no managed nodes'}"
    )


def text_table(plan: FleetPlan, width: int = 60) -> str:
    """A fixed-width table for the Airflow task log (long cells are wrapped onto continuation lines)."""
    import textwrap

    rows = [row(p) for p in _ordered(plan)]
    lines = [headline(plan), *plan.notes]
    widths = {c: min(width, max([len(c), *(len(r[c]) for r in rows)])) for c in COLUMNS}
    lines.append(" | ".join(c.ljust(widths[c]) for c in COLUMNS))
    lines.append("-+-".join("-" * widths[c] for c in COLUMNS))
    for r in rows:
        cells = {c: textwrap.wrap(r[c], widths[c]) or [""] for c in COLUMNS}
        for i in range(max(len(v) for v in cells.values())):
            lines.append(
                " | ".join((cells[c][i] if i < len(cells[c]) else "").ljust(widths[c]) for c in COLUMNS)
            )
    return "\n".join(lines)


def markdown(plan: FleetPlan) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["# GPU partition plan", "", headline(plan), "", *[f"> {note}" for note in plan.notes], ""]
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    lines += ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in map(row, _ordered(plan))]
    return "\n".join(lines) + "\n"


def html_page(plan: FleetPlan) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        f'<tr class="{html.escape(p.action)}">'
        + "".join(f"<td>{html.escape(row(p)[c])}</td>" for c in COLUMNS)
        + "</tr>"
        for p in _ordered(plan)
    )
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in plan.notes)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>GPU partition plan</title><style>"
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 8px;vertical-align:top;font-size:13px}tr.change{background:#eef7ee}"
        "tr.blocked,tr.cordon-to-drain,tr.uncordon{background:#fff4e0}tr.skip{color:#777}.note{color:#a40}</style></head>"
        f"<body><h1>GPU partition plan</h1><p>{html.escape(headline(plan))}</p>{notes}"
        f"<table><tr>{head}</tr>{body}</table></body></html>"
    )


def frame(plan: FleetPlan) -> pd.DataFrame:
    """One row per node with typed columns (for Parquet and the cost report)."""
    import pandas as pd

    records: list[dict[str, Any]] = [
        {
            "node": p.node,
            "gpu_model": p.gpu_model,
            "gpus": p.gpus,
            "action": p.action,
            "policy": p.policy,
            "current_mig_config": p.current.mig_config,
            "current_device_plugin_config": p.current.device_plugin_config,
            "desired_mig_config": p.desired.mig_config,
            "desired_device_plugin_config": p.desired.device_plugin_config,
            "rule": p.rule,
            "reasons": "; ".join(p.reasons),
            "util_p50": p.util_p50,
            "util_upper": p.util_upper,
            "gain_gpu_hours": p.gain_gpu_hours,
            "disruption_pods": len(p.disruption),
            "disruption": "; ".join(p.disruption),
        }
        for p in plan.nodes
    ]
    return pd.DataFrame.from_records(records)


def _ordered(plan: FleetPlan) -> list[NodePlan]:
    return sorted(plan.nodes, key=lambda p: (ACTIONS.index(p.action), p.node))
