"""Reading the cost report's inputs: validated partitions, the planner's runs and the rollout ledger.

The only module of :mod:`slicewise.costs` that reads storage or the ledger; everything it returns is plain data
for the pure modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from slicewise.costs.accuracy import ForecastSet
from slicewise.costs.savings import AppliedChange, RolloutCounts
from slicewise.costs.sharing import LabelEvent, LayoutHistory, ledger_event, observed_events

if TYPE_CHECKING:
    import pandas as pd
    from airflow.sdk import ObjectStoragePath

    from slicewise.rollout.ledger import Ledger

#: How many rollouts back the ledger is read (newest first); a day holds at most 24 planner runs.
LEDGER_ROLLOUTS = 500
#: How far before a report's window the planner's runs are read: the layout history needs the newest
#: observation before the window, and the planner runs every hour.
PLAN_LOOKBACK = timedelta(days=2)


@dataclass(frozen=True)
class PlanRun:
    """A planner run folder and when it was made (from the run id in its name, else the files' time)."""

    folder: str
    made_at: datetime
    observed: str | None
    forecasts: str | None


def published_hours(root: ObjectStoragePath, hours: Iterable[datetime]) -> list[tuple[datetime, str]]:
    """(hour, folder) of each hour of ``hours`` with a published (validated) partition; quarantined or missing
    hours are never read."""
    from slicewise import store

    out = []
    for hour in hours:
        folder = store.PartitionPaths(root, hour).published
        if store.read_manifest(folder) is not None:
            out.append((hour, str(folder)))
    return out


def read_hour(folder: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The GPU and demand frames of a published partition and its sample step (seconds)."""
    from slicewise import store

    path = store.storage_path(folder)
    gpu, meta = store.read_frame(path / store.GPU_FILE)
    demand, _ = store.read_frame(path / store.DEMAND_FILE)
    return gpu, demand, int(float(meta.get("step_s", "60")))


def plan_runs(root: ObjectStoragePath, since: datetime | None = None) -> list[PlanRun]:
    """Every ``plans/<run>/`` with an ``observed.json`` or ``forecasts.json``, oldest first; runs whose name
    says they were made before ``since`` are skipped without touching their files (months of hourly plans
    on an object store would otherwise cost a request each)."""
    from slicewise.planning.storage import FORECASTS, OBSERVED, run_time

    plans = root / "plans"
    if not plans.exists():
        return []
    out = []
    for folder in plans.iterdir():
        named = run_time(folder.name)
        if since is not None and named is not None and named < since:
            continue
        if not folder.is_dir():
            continue
        observed, forecasts = folder / OBSERVED, folder / FORECASTS
        present = [p for p in (observed, forecasts) if p.exists()]
        if not present:
            continue
        made_at = named or _modified(present[0])
        if made_at is None:
            continue
        out.append(
            PlanRun(
                str(folder),
                made_at,
                str(observed) if observed.exists() else None,
                str(forecasts) if forecasts.exists() else None,
            )
        )
    return sorted(out, key=lambda r: (r.made_at, r.folder))


def _modified(path: ObjectStoragePath) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(path.stat().st_mtime), tz=UTC)
    except (AttributeError, KeyError, OSError, TypeError, ValueError):
        return None  # an object store without modification times: the run cannot be placed in time


def layout_history(
    runs: Sequence[PlanRun], until: datetime, changes: Sequence[AppliedChange]
) -> LayoutHistory:
    """Observed snapshots made before ``until`` plus the ledger's applied changes (see ``costs.sharing``)."""
    from slicewise import store
    from slicewise.planning.storage import read_observations

    events: list[LabelEvent] = []
    for run in runs:
        if run.observed is None or run.made_at >= until:
            continue
        observations = read_observations(store.storage_path(run.observed))
        events.extend(observed_events(run.made_at, (o.node for o in observations)))
    events.extend(ledger_event(c.node, c.changed_at, c.after) for c in changes if c.changed_at < until)
    return LayoutHistory.of(events)


def forecast_sets(runs: Sequence[PlanRun], start: datetime, end: datetime) -> list[ForecastSet]:
    """The forecasts of the plans whose origin lies in ``[start, end)``."""
    from slicewise import store
    from slicewise.planning.storage import read_forecasts

    out = []
    for run in runs:
        if run.forecasts is None:
            continue
        candidate = ForecastSet(run.made_at, read_forecasts(store.storage_path(run.forecasts)))
        if start <= candidate.origin < end:
            out.append(candidate)
    return out


def ledger_activity(
    ledger: Ledger, start: datetime, end: datetime
) -> tuple[list[AppliedChange], RolloutCounts]:
    """Changes applied and kept up to ``end`` (nodes DONE in PROMOTED rollouts), and the period's counts:
    changes applied in ``[start, end)``, rollouts rolled back or failed in it."""
    from slicewise.rollout.ledger import NodeStatus, RolloutStatus

    changes: list[AppliedChange] = []
    rolled_back: list[int] = []
    failed = 0
    for rollout in ledger.recent_rollouts(limit=LEDGER_ROLLOUTS):
        in_period = start <= rollout.updated_at < end
        if rollout.status == RolloutStatus.ROLLED_BACK and in_period:
            rolled_back.append(rollout.id)
        elif rollout.status == RolloutStatus.FAILED and in_period:
            failed += 1
        if rollout.status != RolloutStatus.PROMOTED:
            continue
        for node in ledger.nodes(rollout.id):
            if node.status != NodeStatus.DONE or node.changed_at is None or node.changed_at >= end:
                continue
            snapshot = node.snapshot or {}
            before = snapshot.get("labels", {}) if isinstance(snapshot.get("labels"), dict) else {}
            changes.append(
                AppliedChange(
                    rollout.id, node.node, node.changed_at, dict(before), dict(node.desired), rollout.run_id
                )
            )
    in_window = sum(1 for c in changes if start <= c.changed_at < end)
    return changes, RolloutCounts(in_window, len(rolled_back), failed, tuple(sorted(rolled_back)))


def lookback_start(start: datetime, savings_hours: int) -> datetime:
    """First hour the report reads: the savings of a change early in the day need the hours before it."""
    return start - timedelta(hours=savings_hours)
