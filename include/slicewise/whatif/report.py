"""The backtest's outputs: the ``--json`` object, a text table, and a self-contained HTML page with plots."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from slicewise.costs.page import table
from slicewise.costs.plots import new_figure, png_base64
from slicewise.whatif.metrics import EVICTION_RULES
from slicewise.whatif.policies import (
    MPS_RELEASE_PREFIX,
    STATIC_SHARED,
    other_whole_gpu_demand,
    standby_flipped_name,
    whole_demand_flipped_name,
)
from slicewise.whatif.reviews import choice_lines, evictable_words
from slicewise.whatif.trace import SIZE_CLASSES

if TYPE_CHECKING:
    from slicewise.whatif.metrics import ClassWait, PolicyResult
    from slicewise.whatif.run import Backtest


def as_json(backtest: Backtest) -> dict[str, Any]:
    gains = backtest.gains()
    config = backtest.config
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
            "notes": [*backtest.trace.notes, *backtest.notes],
        },
        "model": {
            "gpu_model": config.gpu_model,
            "model_map": dict(config.model_map),
            "scheduler": config.scheduler,
            "prefer_shared": config.prefer_shared,
            "reconfigure_s": config.reconfigure_s,
            "drain_s": config.drain_s,
            "eviction_cost_s": config.eviction_cost_s,
            "evictable": config.evictable,
            "drain_cap_s": config.drain_cap_s,
            "scale_up_s": config.scale_up_s,
            "scale_down_unneeded_s": config.scale_down_unneeded_s,
            "scale_down_utilization_threshold": config.scale_down_utilization_threshold,
            "scale_down_delay_after_add_s": config.scale_down_delay_after_add_s,
            "shared_node_group": config.shared_node_group,
            "shared_node_group_max_gpus": config.shared_node_group_max_gpus,
            "plan_offset_s": config.plan_offset_s,
            "price_per_gpu_hour": config.price_per_gpu_hour,
            "prices": dict(config.prices),
            "planner": {
                "min_gain_gpu_hours": config.planner.min_gain_gpu_hours,
                "dwell_hours": config.planner.dwell_hours,
                "max_change_share": config.planner.max_change_share,
                "plan_gpus_without_mig": config.planner.plan_gpus_without_mig,
                "split_layouts": config.planner.split_layouts,
                "consolidation": config.planner.consolidation,
                "release_below": config.planner.release_below,
                "release_below_large": config.planner.release_below_large,
                "shared_reserve": config.planner.shared_reserve,
                "standby": config.planner.standby,
                "keep_shaped": config.planner.keep_shaped,
                "mps_release_below": config.planner.mps_release_below,
                "pinned_share": config.planner.pinned_share,
                "scarce_kind_share": config.planner.scarce_kind_share,
                "rehome": config.planner.rehome,
                "whole_gpu_demand": config.planner.whole_gpu_demand,
                "cordon_to_drain": config.planner.cordon_to_drain,
            },
        },
        "seconds": round(backtest.seconds, 1),
        "consolidation_choice": consolidation_choice(backtest),
        "standby_choice": standby_choice(backtest),
        "whole_gpu_demand_choice": whole_demand_choice(backtest),
        "mps_release_choice": mps_release_choice(backtest),
        "setup_choice": setup_choice(backtest),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _cut(gains: dict[str, float | None], metric: str) -> str:
    """``-80% (96%)``: the change from static, and its share of the way to ideal."""
    mine, share = gains[f"{metric}_vs_static"], gains[f"{metric}_share_of_ideal"]
    if mine is None:
        return "-"
    change = f"{-mine:+.0%}" if round(mine, 2) else "0%"
    return change + ("" if share is None else f" ({share:.0%})")


def class_means(by_class: Mapping[str, ClassWait]) -> str:
    """Mean wait per size class in seconds, fractional / 1 GPU / multi-GPU ("-" for a class without pods)."""
    parts = []
    for size in SIZE_CLASSES:
        found = by_class.get(size)
        parts.append("-" if found is None or not found.pods else f"{found.mean_s:,.0f}")
    return " / ".join(parts)


HEADERS = [
    "policy",
    "node-GPU-h",
    "vs static (to ideal)",
    "paid GPU-h",
    "wait mean s",
    "vs static (to ideal)",
    "wait P95 s",
    "> 5 min",
    "mean s: frac / 1 / multi",
    "GPUs releasable",
    "reconfigs/node/h",
    "evicted",
    "util",
    "cost",
    "never served",
]


def rows(backtest: Backtest) -> list[list[str]]:
    gains = backtest.gains()
    out = []
    for name, r in backtest.results.items():
        out.append(
            [
                name,
                f"{r.node_gpu_hours:,.0f}",
                _cut(gains[name], "node_gpu_hours_cut"),
                f"{r.service_gpu_hours:,.0f}",
                f"{r.wait_mean_s:,.0f}",
                _cut(gains[name], "wait_cut"),
                f"{r.wait_p95_s:,.0f}",
                f"{r.wait_over_5min:.1%}",
                class_means(r.wait_by_class),
                f"{r.gpus_releasable:,.1f}",
                f"{r.reconfigs_per_node_hour:.4f}",
                f"{r.pods_evicted:,}",
                f"{r.gpu_utilisation:.1%}",
                f"{r.cost:,.0f}",
                f"{r.still_waiting:,}",
            ]
        )
    return out


def text_table(backtest: Backtest) -> str:
    return format_table([HEADERS, *rows(backtest)])


PAID_HEADERS = [
    "policy",
    "paid GPU-h",
    "requested",
    "slot slack",
    "free on nodes in use",
    "nodes with no pod",
]


def paid_rows(backtest: Backtest) -> list[list[str]]:
    """Where each policy's paid GPU-hours went (:class:`~.metrics.PaidSplit`), in GPU-hours and shares of them."""
    out = []
    for name, r in backtest.results.items():
        out.append(
            [
                name,
                f"{r.service_gpu_hours:,.0f}",
                *(
                    f"{part:,.0f} ({share:.0%})"
                    for part, share in zip(r.paid.parts(), r.paid.shares(), strict=True)
                ),
            ]
        )
    return out


def paid_table(backtest: Backtest) -> str:
    return format_table([PAID_HEADERS, *paid_rows(backtest)])


EVICTION_HEADERS = ["policy", "evicted", *EVICTION_RULES, "most of one pod (by rule)", "nodes held"]


def eviction_rows(backtest: Backtest) -> list[list[str]]:
    """Each policy's evictions by the rule that made them, the most-evicted pod's, and the nodes it held instead
    (cordoned so that pods it may not evict finish), for the policies that evicted or held any."""
    out = []
    for name, r in backtest.results.items():
        if not r.pods_evicted and not r.holds:
            continue
        worst = ", ".join(f"{rule} {times:,}" for rule, times in r.most_evicted_pod_by_rule.items())
        out.append(
            [
                name,
                f"{r.pods_evicted:,}",
                *(f"{r.evictions_by_rule.get(rule, 0):,}" for rule in EVICTION_RULES),
                f"{r.most_evictions_of_a_pod:,} ({worst or '-'})",
                f"{r.holds:,}",
            ]
        )
    return out


def eviction_table(backtest: Backtest) -> str:
    """The evictions table, or "" when no policy evicted a pod or held a node."""
    found = eviction_rows(backtest)
    return format_table([EVICTION_HEADERS, *found]) if found else ""


def consolidation_choice(backtest: Backtest) -> list[str]:
    """For each policy replayed once per consolidation mode (``packing/off``, ``packing/nodes``, ...): the modes
    that waited least and those that used the fewest node-GPU-hours (ties listed together; node-GPU-hours
    compared only among the modes that left the fewest pods unserved, as :meth:`Backtest.gains` does), the pods
    each mode evicted, and the modes that waited longer than ``static`` — what ``planner_consolidation`` trades on
    this history."""
    families: dict[str, dict[str, PolicyResult]] = {}
    for name, result in backtest.results.items():
        family, _, mode = name.partition("/")
        if mode:
            families.setdefault(family, {})[mode] = result
    static = backtest.results.get("static")
    lines = []
    for family, by_mode in families.items():
        waits = _best(by_mode, lambda r: round(r.wait_mean_s))
        fewest_unserved = min(r.still_waiting for r in by_mode.values())
        served = {m: r for m, r in by_mode.items() if r.still_waiting == fewest_unserved}
        hours = _best(served, lambda r: round(r.node_gpu_hours))
        line = (
            f"{family}: least wait with planner_consolidation={', '.join(waits)} "
            f"({by_mode[waits[0]].wait_mean_s:,.0f} s), fewest node-GPU-hours with {', '.join(hours)} "
            f"({by_mode[hours[0]].node_gpu_hours:,.0f}); pods evicted: "
            + ", ".join(f"{m} {r.pods_evicted:,}" for m, r in by_mode.items())
        )
        unserved = [f"{m} ({r.still_waiting:,})" for m, r in by_mode.items() if r.still_waiting]
        if unserved:
            line += f"; pods never served with {', '.join(unserved)}"
        longer = [m for m, r in by_mode.items() if static is not None and r.wait_mean_s > static.wait_mean_s]
        if longer:
            line += f"; waits longer than static with {', '.join(longer)}"
        lines.append(line)
    return lines


def standby_choice(backtest: Backtest) -> list[str]:
    """With ``packing`` replayed with ``planner_standby`` the other way round too
    (:func:`slicewise.whatif.policies.with_standby_flipped`): one line comparing it with ``packing`` under the
    setting (the ``packing`` row, or ``packing/<the setting's mode>`` when modes are compared) — mean wait and
    node-GPU-hours, what the setting trades; none otherwise."""
    standby = backtest.config.planner.standby

    def on_off(value: bool) -> str:
        return "on" if value else "off"

    return _setting_choice(
        backtest,
        standby_flipped_name(not standby),
        f"standby {on_off(standby)}",
        f"standby {on_off(not standby)}",
    )


def whole_demand_choice(backtest: Backtest) -> list[str]:
    """With ``packing`` replayed with the other ``planner_whole_gpu_demand`` too
    (:func:`slicewise.whatif.policies.with_whole_demand_flipped`): one line comparing it with ``packing`` under
    the setting, as :func:`standby_choice` does; none otherwise."""
    rule = backtest.config.planner.whole_gpu_demand
    other = other_whole_gpu_demand(rule)
    return _setting_choice(
        backtest, whole_demand_flipped_name(other), f"whole GPUs for {rule}", f"whole GPUs for {other}"
    )


def mps_release_choice(backtest: Backtest) -> list[str]:
    """With ``packing`` replayed with other values of ``planner_mps_release_below`` too
    (:func:`slicewise.whatif.policies.with_mps_release_compared`): one line per value comparing it with
    ``packing`` under the setting, as :func:`standby_choice` does (with the paid GPU-hours, which the setting
    moves under an autoscaler); none otherwise."""
    setting = f"MPS release below {backtest.config.planner.mps_release_below:g}"
    return [
        line
        for name in backtest.results
        if name.startswith(MPS_RELEASE_PREFIX)
        for line in _setting_choice(backtest, name, setting, name.removeprefix("packing, "))
    ]


def setup_choice(backtest: Backtest) -> list[str]:
    """With ``static-shared`` replayed (``packing``'s cluster setup, the node group shared by MPS, without a
    planner): one line of what ``packing``'s hourly decisions add beyond that setup — mean wait and paid
    GPU-hours against it, and ``static``'s wait; none otherwise (docs/backtest.md, "What the hourly decisions add
    beyond the setup")."""
    setup = backtest.results.get(STATIC_SHARED)
    mine = _packing_row(backtest)
    static = backtest.results.get("static")
    if setup is None or mine is None or static is None:
        return []
    return [
        f"the hourly decisions: packing waits {mine.wait_mean_s:,.0f} s, "
        f"{_change(setup.wait_mean_s, mine.wait_mean_s)} against {STATIC_SHARED} "
        f"({setup.wait_mean_s:,.0f} s: the node group shared by MPS without a planner; static "
        f"{static.wait_mean_s:,.0f} s); paid GPU-hours {mine.service_gpu_hours:,.0f}, "
        f"{_change(setup.service_gpu_hours, mine.service_gpu_hours)} against {STATIC_SHARED}'s "
        f"{setup.service_gpu_hours:,.0f}"
    ]


def _setting_choice(backtest: Backtest, flipped_name: str, setting: str, other: str) -> list[str]:
    """One line: ``packing`` under the planner setting (``setting`` names it) against the row ``flipped_name``
    (``other``): mean wait and node-GPU-hours, or why the node-GPU-hours do not compare; with an autoscaler
    replayed, the paid GPU-hours too (what it removes is not in the node-GPU-hours); none without both."""
    flipped = backtest.results.get(flipped_name)
    mine = _packing_row(backtest)
    if flipped is None or mine is None:
        return []
    line = (
        f"packing with {setting} (the setting): {mine.wait_mean_s:,.0f} s mean wait, "
        f"{mine.node_gpu_hours:,.0f} node-GPU-hours; {other}: "
        f"{flipped.wait_mean_s:,.0f} s ({_change(mine.wait_mean_s, flipped.wait_mean_s)}), "
    )
    if flipped.still_waiting != mine.still_waiting:
        return [
            line + f"{flipped.node_gpu_hours:,.0f} node-GPU-hours, not comparable: pods never served "
            f"{mine.still_waiting:,} with the setting, {flipped.still_waiting:,} the other way round"
        ]
    line += (
        f"{flipped.node_gpu_hours:,.0f} node-GPU-hours "
        f"({_change(mine.node_gpu_hours, flipped.node_gpu_hours)})"
    )
    if backtest.config.scale_down_unneeded_s is not None:
        line += (
            f"; paid GPU-hours {mine.service_gpu_hours:,.0f} with the setting, "
            f"{flipped.service_gpu_hours:,.0f} ({_change(mine.service_gpu_hours, flipped.service_gpu_hours)})"
        )
    return [line]


def _packing_row(backtest: Backtest) -> PolicyResult | None:
    """``packing`` under the planner's settings: the ``packing`` row, or ``packing/<the setting's mode>`` when
    modes are compared."""
    consolidation = backtest.config.planner.consolidation
    return backtest.results.get("packing") or backtest.results.get(f"packing/{consolidation}")


def _change(before: float, after: float) -> str:
    return f"{(after - before) / before:+.1%}" if before > 0 else "n/a"


def _best(by_mode: dict[str, PolicyResult], figure: Callable[[PolicyResult], float]) -> list[str]:
    """The modes whose ``figure`` (rounded as printed) is the lowest, in their order."""
    low = min(figure(r) for r in by_mode.values())
    return [m for m, r in by_mode.items() if figure(r) == low]


def format_table(lines: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in lines
    )


def _over_time(
    results: dict[str, PolicyResult], field: str, title: str, ylabel: str, log: bool = False
) -> str | None:
    if not any(r.hours for r in results.values()):
        return None
    figure = new_figure(10, 3.2)
    axes = figure.subplots()
    for name, result in results.items():
        points = [(h.start_s / 86_400, getattr(h, field)) for h in result.hours]
        points = [(day, value) for day, value in points if not math.isnan(value)]
        axes.plot([d for d, _ in points], [v for _, v in points], label=name, linewidth=0.9)
    axes.set_title(title)
    axes.set_xlabel("day of the trace")
    axes.set_ylabel(ylabel)
    if log:  # a starving policy's figures dwarf the others' by orders of magnitude
        axes.set_yscale("symlog")
    axes.legend(fontsize="small", ncols=3)
    return png_base64(figure)


def _evictions_html(backtest: Backtest) -> str:
    found = eviction_rows(backtest)
    if not found:
        return ""
    return (
        "<h2>Evictions by rule</h2>\n"
        + table(EVICTION_HEADERS, found)
        + "\n<p>Who evicted the pods: a change of MIG layout or MPS replicas (the node is drained first), a "
        "consolidation, a fractional pod re-homed to a free MPS tenant, or the autoscaler draining a node in use "
        "under its utilisation threshold. A pod evicted many times, by a re-homing and the autoscaler in turn, "
        "shows in the last column.</p>"
    )


def render_html(backtest: Backtest) -> str:
    data = as_json(backtest)
    plots = [
        _over_time(
            backtest.results,
            "wait_mean_s",
            "Mean wait of the pods starting in each hour (log scale)",
            "seconds",
            log=True,
        ),
        _over_time(
            backtest.results,
            "gpus_in_use",
            "GPUs of the nodes hosting pods (node-GPU-hours per hour)",
            "GPUs",
        ),
        _over_time(backtest.results, "waiting", "Pods waiting (hourly mean, log scale)", "pods", log=True),
        _over_time(backtest.results, "utilisation", "Utilisation of the GPUs in use (hourly)", "fraction"),
        _over_time(backtest.results, "reconfigs", "Reconfigurations per hour", "nodes"),
    ]
    images = "".join(f"<img alt='plot' src='data:image/png;base64,{p}'>" for p in plots if p)
    trace, model = data["trace"], data["model"]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in trace["notes"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Slicewise what-if backtest</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px}}td.num{{text-align:right}}img{{display:block;margin:1em 0}}</style>
</head><body>
<h1>What-if backtest</h1>
<p>{html.escape(trace["pods_file"])}: {trace["pods"]:,} GPU pods on {trace["nodes"]:,} nodes
({trace["gpus"]:,} GPUs), scheduler model {html.escape(model["scheduler"])}, reconfiguration
{model["reconfigure_s"]:.0f} s, eviction cost {model["eviction_cost_s"]:.0f} s,
{html.escape(evictable_words(model))}.
Ran in {data["seconds"]:.0f} s on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.</p>
<ul>{notes}</ul>
{table(HEADERS, rows(backtest))}
<p>"vs static (to ideal)": the change from <code>static</code> and, in brackets, its share of the way from
<code>static</code> to <code>ideal</code> (fractional sharing on every GPU, repacked for free: the bound).
What each figure means, the scheduler models and the policies: docs/backtest.md.</p>
<h2>Where the paid GPU-hours went</h2>
{table(PAID_HEADERS, paid_rows(backtest))}
<p>What the running pods requested; what their slots held beyond it (a fractional pod on a whole GPU or a larger
slice or tenant); free capacity on the nodes hosting pods, stranded since none of them can go without moving
pods; and nodes paid for with no pod on them. The four add up to the paid GPU-hours.</p>
{_evictions_html(backtest)}
{"".join(f"<p>{html.escape(line)}</p>" for line in choice_lines(data))}
{images}
</body></html>
"""
