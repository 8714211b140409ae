"""The report's plots, each a PNG as base64 text for a ``data:`` URI (the HTML stays one self-contained file).

Matplotlib's object API (``Figure``), not ``pyplot``: no global state, no GUI backend, safe in any worker.
Each function returns None when there is nothing to draw; the report then says so in words.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slicewise.costs.samples import NO_WORKLOAD

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

NO_WORKLOAD_COLOUR = "#b0b0b0"
NO_WORKLOAD_LABEL = "no workload (__idle__)"
USED_COLOUR, IDLE_COLOUR, UNMEASURED_COLOUR = "#2b8a3e", "#e8590c", "#adb5bd"


def png_base64(figure: Figure) -> str:
    """The figure as a PNG in base64 text, for a ``data:image/png;base64,`` URI (also the backtest's report)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def new_figure(width: float = 9.0, height: float = 3.6) -> Figure:
    """A figure of the object API (no pyplot state), laid out so labels fit."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def cost_by_namespace_over_time(rows: pd.DataFrame, currency: str) -> str | None:
    """Stacked bars: cost per hour by namespace, the unallocated capacity on top in grey."""
    if rows.empty:
        return None
    table = rows.pivot_table(
        index="start", columns="namespace", values="gpuCost", aggfunc="sum", fill_value=0.0
    )
    order = [c for c in table.sum().sort_values(ascending=False).index if c != NO_WORKLOAD]
    if NO_WORKLOAD in table.columns:
        order.append(NO_WORKLOAD)
    figure = new_figure()
    axes = figure.subplots()
    labels = [s[11:16] for s in table.index]
    positions = list(range(len(labels)))
    bottom = [0.0] * len(table)
    palette = _palette(len(order))
    for index, namespace in enumerate(order):
        values = table[namespace].tolist()
        unallocated = namespace == NO_WORKLOAD
        axes.bar(
            positions,
            values,
            bottom=bottom,
            # matplotlib hides legend labels that start with "_"
            label=NO_WORKLOAD_LABEL if unallocated else namespace,
            color=NO_WORKLOAD_COLOUR if unallocated else palette[index],
            width=0.8,
        )
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_xticks(positions, labels)
    axes.set_ylabel(f"GPU cost per hour ({currency})")
    axes.set_xlabel("hour (UTC)")
    axes.set_title("Cost by namespace over time")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _thin_ticks(axes, len(labels))
    return png_base64(figure)


def allocated_used_idle(namespaces: pd.DataFrame) -> str | None:
    """Horizontal stacked bars per namespace: used, idle and not-measured GPU-hours (= allocated)."""
    if namespaces.empty:
        return None
    from matplotlib.patches import Patch

    frame = namespaces.iloc[::-1]
    figure = new_figure(9.0, 0.45 * len(frame) + 1.4)
    axes = figure.subplots()
    names = frame["namespace"].tolist()
    positions = list(range(len(names)))
    used = frame["usedGpuHours"].tolist()
    idle = frame["idleGpuHours"].tolist()
    unmeasured = frame["unmeasuredGpuHours"].tolist()
    idle_colours = [NO_WORKLOAD_COLOUR if n == NO_WORKLOAD else IDLE_COLOUR for n in names]
    axes.barh(positions, used, color=USED_COLOUR)
    axes.barh(positions, idle, left=used, color=idle_colours)
    left = [u + i for u, i in zip(used, idle, strict=True)]
    handles = [
        Patch(color=USED_COLOUR, label="used"),
        Patch(color=IDLE_COLOUR, label="idle (allocated, not used)"),
    ]
    if any(v > 0 for v in unmeasured):
        axes.barh(positions, unmeasured, left=left, color=UNMEASURED_COLOUR, hatch="//")
        handles.append(Patch(color=UNMEASURED_COLOUR, hatch="//", label="not measured"))
    if NO_WORKLOAD in names:
        handles.append(Patch(color=NO_WORKLOAD_COLOUR, label="unallocated (nobody requested it)"))
    axes.set_yticks(positions, names)
    axes.set_xlabel("GPU-hours")
    axes.set_title("Allocated vs used vs idle")
    axes.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png_base64(figure)


def savings(changes: Sequence[Mapping[str, Any]]) -> str | None:
    """Per estimated change: the node's waste per hour before and after (GPU-hours per hour)."""
    estimated = [c for c in changes if c.get("status") == "estimated"]
    if not estimated:
        return None
    figure = new_figure(9.0, 3.2)
    axes = figure.subplots()
    labels = [f"#{c['rollout_id']} {c['node']}" for c in estimated]
    positions = list(range(len(estimated)))
    axes.bar([p - 0.2 for p in positions], [c["wasteBefore"] for c in estimated], 0.4, label="waste before")
    axes.bar([p + 0.2 for p in positions], [c["wasteAfter"] for c in estimated], 0.4, label="waste after")
    axes.set_xticks(positions, labels, fontsize=8)
    axes.set_xlim(-0.8, len(positions) - 0.2 + max(0, 2 - len(positions)))  # one change: not a wall of colour
    axes.set_ylabel("idle + unallocated GPU-h per hour")
    axes.set_title("Savings per applied change (estimate)")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png_base64(figure)


def forecast_vs_actual(series: pd.DataFrame) -> str | None:
    """Per predictor: the fleet's mean P50 and upper forecast vs the realised mean load, per forecast origin."""
    if series.empty:
        return None
    figure = new_figure()
    axes = figure.subplots()
    origins = sorted(series["origin"].unique())
    position = {origin: index for index, origin in enumerate(origins)}
    palette = _palette(series["predictor"].nunique())
    for colour, (predictor, group) in zip(palette, series.groupby("predictor"), strict=False):
        group = group.sort_values("origin")
        x = [position[o] for o in group["origin"]]
        axes.plot(x, group["p50"], marker="o", color=colour, label=f"{predictor} P50")
        axes.plot(x, group["upper"], marker="v", linestyle="--", color=colour, label=f"{predictor} upper")
        axes.plot(
            x, group["realised"], marker="s", linestyle=":", color="black", label=f"realised ({predictor})"
        )
    axes.set_xticks(list(position.values()), [o.strftime("%H:%M") for o in origins])
    axes.set_xlim(-0.5, len(origins) - 0.5)
    axes.set_ylim(bottom=0)
    axes.set_ylabel("mean engine activity (0-1)")
    axes.set_xlabel("forecast origin (UTC)")
    axes.set_title("Forecast vs actual (fleet mean per forecast)")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png_base64(figure)


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(max(n, 1))]


def _thin_ticks(axes: Any, count: int) -> None:
    """At most ~12 hour labels on the x axis."""
    step = max(1, count // 12)
    for index, label in enumerate(axes.get_xticklabels()):
        label.set_visible(index % step == 0)
