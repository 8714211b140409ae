"""The cost report's ``summary.json`` as the cost page shows it (docs/costs.md documents the keys).

Pure. Keys the page does not know are shown too (totals as extra rows, whole sections under their own
names), so a richer summary never hides data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slicewise.ui.tables import Table, formatted, is_number, money, number, record_table, value_tables

#: Known totals in reading order, with their labels. Others follow under their own names.
TOTALS = (
    ("gpuHours", "GPU-hours"),
    ("usedGpuHours", "used GPU-hours"),
    ("idleGpuHours", "idle GPU-hours"),
    ("unmeasuredGpuHours", "unmeasured GPU-hours (no activity metric)"),
    ("unallocatedGpuHours", "GPU-hours no workload held (__idle__)"),
    ("allocatedGpuHours", "allocated GPU-hours"),
    ("allocatedIdleGpuHours", "allocated but idle GPU-hours"),
    ("capacityGpuHours", "capacity (GPUs x hours)"),
    ("gpuEfficiency", "GPU efficiency"),
    ("gpuCost", "GPU cost"),
    ("gpuCostIdle", "idle cost"),
    ("allocatedCostIdle", "allocated idle cost"),
    ("unallocatedCost", "cost of capacity no workload held (__idle__)"),
)
#: Sections after the totals and namespaces, with their headings; any other key of the summary follows under
#: its own name, so a richer summary never hides data.
SECTIONS = (
    ("teams", "By team"),
    ("idle_attribution", "Idle time by namespace, with its evidence"),
    ("savings", "Savings attributed to the control loop (estimate)"),
    ("forecast_accuracy", "Forecast accuracy"),
    ("changes", "Changes applied"),
    ("rollbacks", "Rollbacks"),
    ("failed_rollouts", "Failed rollouts"),
    ("price_sources", "Prices"),
)
#: Counts shown together in one small table when they are plain numbers.
COUNTS = (("changes", "changes applied"), ("rollbacks", "rollbacks"), ("failed_rollouts", "failed rollouts"))
#: Keys shown as facts at the top (or, for "files", as the page's own links).
FACT_KEYS = frozenset(
    {"date", "window", "partial", "hours", "currency", "default_price_per_gpu_hour", "cost_mig_share"}
    | {"generated_at", "start", "end", "totals", "namespaces", "notes", "files"}
)


@dataclass(frozen=True)
class Section:
    title: str
    tables: tuple[tuple[str, Table], ...]  # (caption, table); the first usually has no caption
    text: str = ""


@dataclass(frozen=True)
class CostView:
    date: str
    facts: tuple[tuple[str, str], ...]
    totals: Table
    namespaces: Table
    sections: tuple[Section, ...]
    notes: tuple[str, ...]


def _window(value: Any) -> str:
    if isinstance(value, Mapping) and ("start" in value or "end" in value):
        return f"{value.get('start', '?')} to {value.get('end', '?')}"
    return formatted("window", value, "")


def _hours(value: Any) -> str:
    if not isinstance(value, Mapping):
        return formatted("hours", value, "")
    text = f"{number(value.get('published'))} of {number(value.get('in_window'))} validated"
    missing = value.get("missing") or []
    return text + (f"; missing: {', '.join(map(str, missing))}" if missing else "")


def _facts(summary: Mapping[str, Any], date: str, currency: str) -> tuple[tuple[str, str], ...]:
    facts = [("date", str(summary.get("date", date)))]
    if "window" in summary:
        facts.append(("window", _window(summary["window"])))
    if summary.get("partial"):
        facts.append(("partial", "yes: the day so far (the daily run replaces it)"))
    if "hours" in summary:
        facts.append(("hours", _hours(summary["hours"])))
    facts.append(("currency", currency or "-"))
    if "default_price_per_gpu_hour" in summary:
        default = money(summary["default_price_per_gpu_hour"], currency)
        facts.append(("default price", f"{default} per GPU-hour (GPU models without a price)"))
    if "cost_mig_share" in summary:
        facts.append(("MIG share", str(summary["cost_mig_share"])))
    for key, label in (("start", "start"), ("end", "end"), ("generated_at", "generated")):
        if key in summary:
            facts.append((label, formatted(key, summary[key], currency)))
    return tuple(facts)


def _sections(summary: Mapping[str, Any], currency: str) -> tuple[Section, ...]:
    """Known sections in :data:`SECTIONS` order, then unknown keys; plain counts share one table."""
    titles, count_labels = dict(SECTIONS), dict(COUNTS)
    keys = [k for k, _ in SECTIONS if k in summary]
    keys += [k for k in summary if k not in titles and k not in FACT_KEYS]
    counts = [k for k in keys if k in count_labels]
    together = bool(counts) and all(summary[k] is None or is_number(summary[k]) for k in counts)
    sections = []
    for key in keys:
        if together and key in count_labels:
            if key == counts[0]:
                rows = tuple((count_labels[k], number(summary[k])) for k in counts)
                table = Table(("", "count"), rows, frozenset({1}))
                sections.append(Section("Changes and rollbacks", (("", table),)))
            continue
        tables, text = value_tables(summary[key], currency)
        sections.append(Section(titles.get(key, key), tables, text))
    return tuple(sections)


def cost_view(summary: Mapping[str, Any], date: str) -> CostView:
    """The report's ``summary.json`` as facts, tables and notes (docs/costs.md lists its keys). Keys
    the page does not know are shown too: totals as extra rows, whole sections under their own names."""
    currency = str(summary.get("currency") or "")
    totals_raw = summary.get("totals")
    totals = totals_raw if isinstance(totals_raw, Mapping) else {}
    labels = dict(TOTALS)
    ordered = [k for k, _ in TOTALS if k in totals] + [k for k in totals if k not in labels]
    total_rows = tuple((labels.get(k, str(k)), formatted(k, totals[k], currency)) for k in ordered)

    namespaces_raw = summary.get("namespaces")
    namespaces = (
        [n for n in namespaces_raw if isinstance(n, Mapping)] if isinstance(namespaces_raw, list) else []
    )

    notes_raw = summary.get("notes")
    if isinstance(notes_raw, list):
        notes = tuple(formatted("", n, currency) for n in notes_raw)
    else:
        notes = (formatted("", notes_raw, currency),) if notes_raw else ()
    return CostView(
        date=str(summary.get("date", date)),
        facts=_facts(summary, date, currency),
        totals=Table(("", "total"), total_rows, frozenset({1})),
        namespaces=record_table(namespaces, currency),
        sections=_sections(summary, currency),
        notes=notes,
    )
