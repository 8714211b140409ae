"""What the fleet, plan and rollout pages show, shaped from nodes, plans and ledger records.

Pure: no I/O, no clock (``now`` is passed in), no HTML (the templates escape every string).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise.catalog.configs import product_without_suffixes
from slicewise.cluster.base import LAST_CHANGE_ANNOTATION, STANDBY_TAINTS, GpuNode
from slicewise.ui.tables import Link, Table, at, is_number, number
from slicewise.whatif import reviews

if TYPE_CHECKING:
    from slicewise.planning.types import FleetPlan
    from slicewise.rollout.ledger import Mark, MeasurementRecord, NodeRecord, Rollout, Wave


# -- the fleet --------------------------------------------------------------------------------------------------

FLEET_COLUMNS = (
    "node",
    "GPUs",
    "mig.config",
    "mig.config.state",
    "device-plugin.config",
    "scheduling",
    "last change (annotation)",
    "last change (ledger)",
    "dwell",
    "Slicewise",
)


def annotated_change(node: GpuNode) -> datetime | None:
    """The node's ``slicewise.io/last-change`` annotation as an aware time (naive means UTC); None when absent
    or unreadable, as the planner reads it."""
    raw = node.annotations.get(LAST_CHANGE_ANNOTATION, "")
    try:
        moment = datetime.fromisoformat(raw) if raw else None
    except ValueError:
        return None
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def dwell_left(changed: datetime | None, dwell_hours: float, now: datetime) -> timedelta:
    """How long until the planner may change the node again (zero when it may now)."""
    if changed is None:
        return timedelta(0)
    return max(timedelta(0), changed + timedelta(hours=dwell_hours) - now)


def _duration(delta: timedelta) -> str:
    minutes = math.ceil(delta.total_seconds() / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def fleet_table(
    nodes: Sequence[GpuNode],
    ledger_changes: Mapping[str, datetime | None] | None,
    dwell_hours: float,
    now: datetime,
) -> Table:
    """One row per managed node. The dwell column counts from the annotation, the time the planner's dwell
    rule reads; the ledger's time is shown next to it ("?" when the ledger could not be read)."""
    rows = []
    for node in nodes:
        changed = annotated_change(node)
        left = dwell_left(changed, dwell_hours, now)
        if changed is None:
            dwell = "free (never changed)"
        elif left > timedelta(0):
            dwell = f"{_duration(left)} left (until {at(changed + timedelta(hours=dwell_hours))})"
        else:
            dwell = "free"
        ledger = "?" if ledger_changes is None else at(ledger_changes.get(node.name))
        rows.append(
            (
                node.name,
                f"{node.gpu_count} x {node.gpu_product or '?'}",
                node.mig_config or "(none)",
                node.mig_config_state or "-",
                node.device_plugin_config or "(default)",
                _scheduling(node),
                at(changed),
                ledger,
                dwell,
                f"hands off: {reason}" if (reason := node.hands_off()) else "plans it",
            )
        )
    return Table(FLEET_COLUMNS, tuple(rows))


def _scheduling(node: GpuNode) -> str:
    """Held by Slicewise (cordoned until its pods finish, for a change), cordoned, a standby node (the planner's
    ``PreferNoSchedule`` taints: pods go there only when no node in use fits, to one of a higher grade, a larger
    node, only when none of a lower grade fits either), or open."""
    if node.held:
        hold = node.hold()
        if hold is None:
            return node.held_words()
        return (
            f"{node.held_words()}, until its pods finish, for "
            f"mig.config={hold.mig_config}, device-plugin.config={hold.device_plugin_config}"
        )
    if node.unschedulable:
        return "cordoned"
    grade = sum(node.has_taint(taint) for taint in STANDBY_TAINTS)
    if grade > 1:
        return f"standby, grade {grade} of {len(STANDBY_TAINTS)} (opened after the lower grades)"
    if grade:
        return "standby (opened when no node in use fits)"
    return "open"


def model_counts(nodes: Iterable[GpuNode]) -> Table:
    """Nodes and GPUs per GPU model: the product label without the suffix GPU Feature Discovery adds for MIG
    (``-MIG-<profile>``) or sharing (``-SHARED``)."""
    counts: dict[str, tuple[int, int]] = {}
    for node in nodes:
        model = product_without_suffixes(node.gpu_product or "?")
        n, gpus = counts.get(model, (0, 0))
        counts[model] = (n + 1, gpus + node.gpu_count)
    rows = tuple((model, number(n), number(g)) for model, (n, g) in sorted(counts.items()))
    return Table(("GPU model", "nodes", "GPUs"), rows, frozenset({1, 2}))


# -- plan and rollouts ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanView:
    headline: str
    table: Table
    notes: tuple[str, ...]


def plan_view(plan: FleetPlan) -> PlanView:
    """The plan's headline, one row per node (changes first, as the plan's own report orders them), notes."""
    from slicewise.planning import report
    from slicewise.planning.types import ACTIONS

    ordered = sorted(plan.nodes, key=lambda p: (ACTIONS.index(p.action), p.node))
    rows = tuple(tuple(report.row(p)[c] for c in report.COLUMNS) for p in ordered)
    return PlanView(
        report.headline(plan),
        Table(tuple(report.COLUMNS), rows, row_classes=tuple(p.action for p in ordered)),
        plan.notes,
    )


ROLLOUT_COLUMNS = ("rollout", "status", "why", "cluster", "run", "started", "last update")


def rollouts_table(rollouts: Sequence[Rollout]) -> Table:
    rows = tuple(
        (
            Link(f"#{r.id}", f"rollouts/{r.id}"),
            r.status,
            r.reason,
            r.cluster,
            r.run_id,
            at(r.created_at),
            at(r.updated_at),
        )
        for r in rollouts
    )
    return Table(ROLLOUT_COLUMNS, rows, row_classes=tuple(r.status.lower() for r in rollouts))


def marks_table(marks: Sequence[Mark]) -> Table:
    rows = tuple((at(m.at), m.kind, m.message, m.cluster, m.run_id) for m in marks)
    return Table(("at", "change", "what", "cluster", "run"), rows)


def waves_table(waves: Sequence[Wave]) -> Table:
    rows = tuple(
        ("canary" if w.index == 0 else f"wave {w.index}", w.status, ", ".join(w.nodes), at(w.updated_at))
        for w in waves
    )
    return Table(("wave", "status", "nodes", "last update"), rows)


def rollout_nodes_table(nodes: Sequence[NodeRecord]) -> Table:
    def labels(values: Mapping[str, Any] | None) -> str:
        return ", ".join(f"{k}={'(absent)' if v is None else v}" for k, v in sorted((values or {}).items()))

    rows = tuple(
        (n.node, str(n.wave), n.status, n.step or "-", labels(n.desired), at(n.changed_at), n.detail or "-")
        for n in nodes
    )
    return Table(("node", "wave", "status", "step", "desired labels", "changed", "detail"), rows)


def _measured(value: float | None) -> str:
    """A measurement's value; NaN stays visible (a missing metric is an explicit outcome, never a blank)."""
    if value is None:
        return "none"
    return "NaN" if math.isnan(value) else number(value, 4)


def measurements_table(measurements: Sequence[MeasurementRecord]) -> Table:
    rows = tuple(
        (at(m.taken_at), str(m.wave), m.check, m.node or "cluster", m.outcome, _measured(m.value), m.detail)
        for m in measurements
    )
    return Table(("taken", "wave", "check", "node", "outcome", "value", "detail"), rows, frozenset({5}))


# -- the what-if review -----------------------------------------------------------------------------------------

REVIEW_COLUMNS = (
    "policy",
    "mean wait s",
    "vs static",
    "node-GPU-h",
    "vs static",
    "paid GPU-h",
    "stranded GPU-h",
    "evicted",
    "never served",
)


@dataclass(frozen=True)
class ReviewView:
    facts: tuple[tuple[str, str], ...]
    # The consolidation choice (a line per policy replayed once per mode), then the standby line.
    choice: tuple[str, ...]
    table: Table


def review_view(summary: Mapping[str, Any]) -> ReviewView:
    """What the What-if page shows of a review's ``summary.json`` (the backtest's ``--json`` plus the window and
    the hours read); a field that is missing reads "-", a summary of the wrong shape raises (the page names it)."""

    def part(key: str) -> Mapping[str, Any]:
        value = summary.get(key)
        return value if isinstance(value, Mapping) else {}

    window, hours, trace, model = part("window"), part("hours"), part("trace"), part("model")
    facts = (
        ("window", f"{window.get('since', '-')} .. {window.get('until', '-')}"),
        (
            "validated hours read",
            f"{number(hours.get('read'))} ({number(hours.get('missing_or_quarantined'))} missing or quarantined, "
            f"{number(hours.get('unreadable', 0))} unreadable)",
        ),
        ("pods, nodes", f"{number(trace.get('pods'))}, {number(trace.get('nodes'))}"),
        ("scheduler model", str(model.get("scheduler", "-"))),
        ("cluster autoscaler", _autoscaler(model)),
        ("evictions replayed", reviews.evictable_words(model)),
    )
    choice = tuple(reviews.choice_lines(summary))

    def cut(figures: Mapping[str, Any], metric: str) -> str:
        value = figures.get(f"{metric}_vs_static")
        if not isinstance(value, int | float) or not is_number(value):
            return "-"
        return f"{-value:+.0%}" if round(value, 2) else "0%"

    rows = tuple(
        (
            str(name),
            number(figures.get("wait_mean_s"), 0),
            cut(figures, "wait_cut"),
            number(figures.get("node_gpu_hours"), 0),
            cut(figures, "node_gpu_hours_cut"),
            number(figures.get("service_gpu_hours"), 0),
            number(_stranded(figures), 0),
            number(figures.get("pods_evicted")),
            number(figures.get("still_waiting")),
        )
        for name, figures in part("policies").items()
        if isinstance(figures, Mapping)
    )
    return ReviewView(facts, choice, Table(REVIEW_COLUMNS, rows, numeric=frozenset(range(1, 9))))


def _stranded(figures: Mapping[str, Any]) -> object:
    """GPU-hours free on nodes that hosted pods (``paid.free_in_use``); None for a review written before the
    split existed."""
    paid = figures.get("paid")
    return paid.get("free_in_use") if isinstance(paid, Mapping) else None


def _autoscaler(model: Mapping[str, Any]) -> str:
    """How the review replayed the cluster autoscaler (Params ``scale_down_unneeded_s``,
    ``scale_down_utilization_threshold``, ``shared_node_group``, ``shared_node_group_max_gpus``). A review written
    before a setting existed did without it: its summary lacks the key."""
    unneeded = model.get("scale_down_unneeded_s")
    if not isinstance(unneeded, int | float) or not is_number(unneeded):
        return "none modelled (only nodes a consolidation releases leave service)"
    threshold = model.get("scale_down_utilization_threshold")
    under = (
        f" and nodes under {threshold:.0%} GPU utilisation whose pods fit elsewhere"
        if isinstance(threshold, int | float) and is_number(threshold) and threshold > 0
        else ""
    )
    largest = model.get("shared_node_group_max_gpus")
    group = (
        "without a node group shared by MPS"
        if model.get("shared_node_group") is not True
        else f"with a node group shared by MPS for the machines of at most {largest} GPUs"
        if isinstance(largest, int)
        else "with a node group shared by MPS"
    )
    return f"removes nodes empty{under} for {unneeded:,.0f} s; {group}"
