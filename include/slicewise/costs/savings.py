"""What the control loop's changes saved: an estimate per applied change, from the allocation rows.

Method (also written into every report): for each change the ledger says was applied — a node DONE in a
PROMOTED rollout, at its ``changed_at`` — compare the node's **waste** (idle + unallocated GPU-hours per hour:
capacity paid for and not used) over the ``window_hours`` whole hours before the hour of the change with the
``window_hours`` whole hours after it. The hour of the change itself (drain, reconfiguration) is left out;
hours without data are skipped. Saving per hour = waste before - waste after, in GPU-hours and in money at the
node's price; the period's saving extrapolates that rate over the report window's validated hours after the
change. It is an **estimate**: load differs between the two windows, so the used GPU-hours per hour before
and after are reported next to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise.costs.samples import NO_WORKLOAD

if TYPE_CHECKING:
    import pandas as pd

METHOD = (
    "estimate: per applied change (node DONE in a PROMOTED rollout), the node's waste (idle + unallocated "
    "GPU-hours per hour) over the {n} whole hours before the hour of the change vs the {n} whole hours after it "
    "(the hour of the change left out); saving = waste before - waste after, priced at the node's price, "
    "extrapolated over the report window's validated hours after the change. Load differs between the windows, "
    "so used GPU-hours per hour are shown beside it."
)


@dataclass(frozen=True)
class AppliedChange:
    rollout_id: int
    node: str
    changed_at: datetime
    before: Mapping[str, str | None]  # the labels Slicewise changes, as the snapshot had them
    after: Mapping[str, str | None]  # the desired labels
    run_id: str = ""


@dataclass(frozen=True)
class RolloutCounts:
    """Rollouts of the period: nodes changed and kept (PROMOTED), rollouts rolled back or failed."""

    changes: int
    rollbacks: int
    failed: int = 0
    rolled_back_ids: tuple[int, ...] = field(default_factory=tuple)


def describe(change: AppliedChange) -> str:
    """``mig.config all-1g.5gb -> all-balanced`` style text of the labels that changed."""
    parts = []
    for label, value in sorted(change.after.items()):
        old = change.before.get(label)
        if old != value:
            short = label.removeprefix("nvidia.com/")
            parts.append(f"{short} {old or 'default'} -> {value or 'default'}")
    return ", ".join(parts) or "no label change recorded"


def _hourly(rows: pd.DataFrame, node: str) -> pd.DataFrame:
    import pandas as pd

    mine = rows[rows["node"] == node]
    if mine.empty:
        return pd.DataFrame(columns=["waste", "waste_cost", "used", "capacity"])
    unallocated = mine["namespace"] == NO_WORKLOAD
    frame = pd.DataFrame(
        {
            "start": mine["start"],
            # Waste = idle allocated hours + every unallocated hour (unused by definition, or not requested).
            "waste": mine["idleGpuHours"].where(~unallocated, mine["gpuHours"]),
            "waste_cost": mine["gpuCostIdle"].where(~unallocated, mine["gpuCost"]),
            "used": mine["usedGpuHours"].where(~unallocated, 0.0),
            "capacity": mine["gpuHours"],
        }
    )
    return frame.groupby("start").sum()


def estimate(
    changes: Sequence[AppliedChange],
    rows: pd.DataFrame,
    window_start: datetime,
    window_end: datetime,
    window_hours: int = 3,
) -> dict[str, Any]:
    """Per change and in total: waste before vs after, the saving per hour and over the period (see module)."""
    per_change = []
    total_hours = total_cost = 0.0
    for change in sorted(changes, key=lambda c: (c.changed_at, c.node)):
        result = _one(change, rows, window_start, window_end, window_hours)
        per_change.append(result)
        if result["status"] == "estimated":
            total_hours += result["savedGpuHours"]
            total_cost += result["savedCost"]
    return {
        "estimate": True,
        "method": METHOD.format(n=window_hours),
        "window_hours": window_hours,
        "gpuHours": total_hours,
        "cost": total_cost,
        "changes": per_change,
    }


def _hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _one(
    change: AppliedChange, rows: pd.DataFrame, window_start: datetime, window_end: datetime, n: int
) -> dict[str, Any]:
    hour = _hour_start(change.changed_at)
    before_hours = [_iso(hour - timedelta(hours=k)) for k in range(n, 0, -1)]
    after_hours = [_iso(hour + timedelta(hours=k)) for k in range(1, n + 1)]
    hourly = _hourly(rows, change.node)
    before = hourly.loc[hourly.index.intersection(before_hours)]
    after = hourly.loc[hourly.index.intersection(after_hours)]
    base: dict[str, Any] = {
        "rollout_id": change.rollout_id,
        "node": change.node,
        "changed_at": change.changed_at.isoformat(),
        "change": describe(change),
        "hours_before": len(before),
        "hours_after": len(after),
    }
    if before.empty or after.empty:
        missing = "before" if before.empty else "after"
        return {**base, "status": f"not estimated: no validated hours {missing} the change"}
    waste_before = float(before["waste"].mean())
    waste_after = float(after["waste"].mean())
    price_before = (
        float(before["waste_cost"].sum() / before["waste"].sum()) if before["waste"].sum() > 0 else 0.0
    )
    price_after = float(after["waste_cost"].sum() / after["waste"].sum()) if after["waste"].sum() > 0 else 0.0
    price = max(price_before, price_after)  # one node, one price: whichever window had waste to price it
    rate = waste_before - waste_after
    first_after = max(window_start, hour + timedelta(hours=1))
    hours_left = float(sum(1 for h in hourly.index if _iso(first_after) <= h < _iso(window_end)))
    return {
        **base,
        "status": "estimated",
        "wasteBefore": waste_before,
        "wasteAfter": waste_after,
        "usedBefore": float(before["used"].mean()),
        "usedAfter": float(after["used"].mean()),
        "savedGpuHoursPerHour": rate,
        "savedCostPerHour": rate * price,
        "hoursInWindowAfter": hours_left,
        "savedGpuHours": rate * hours_left,
        "savedCost": rate * price * hours_left,
    }
