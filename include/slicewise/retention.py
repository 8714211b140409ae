"""How long the store keeps its hourly data (setting ``store_retention_days``): the ingest DAG's ``prune_store``.

Each run of ``gpu_metrics_ingest`` that publishes an hour then removes, under the storage root, what is older
than the retention counted back from the newest published hour (as Prometheus counts its own retention back
from its newest sample, so a fleet that stops reporting keeps its last days): hourly partitions under
``metrics/`` and ``quarantine/``, the ingest's staging left by attempts never retried, the work folders of cost
reports that failed for good, and the planner's ``plans/<run>/`` folders (never the newest plan's). Cost
reports and what-if reviews are small, one a day or less, and are kept. The retention is never shorter than
what the DAGs read back: the forecaster's ``forecast_history_hours``, and the daily cost report's day with its
savings hours and the planner runs before it (:data:`slicewise.costs.sources.PLAN_LOOKBACK`), a day late.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise import store
from slicewise.costs.sources import PLAN_LOOKBACK
from slicewise.costs.steps import prune_work_folders
from slicewise.planning.storage import prune_runs
from slicewise.settings import Settings, SettingsError

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

log = logging.getLogger(__name__)


def store_history(settings: Settings) -> timedelta | None:
    """How far back from the newest published hour the store keeps its data (None: for ever, the value 0).
    SettingsError on a negative or non-finite value."""
    days = settings.store_retention_days
    if not (math.isfinite(days) and days >= 0):
        raise SettingsError(f"setting store_retention_days={days!r}: expected 0 (keep for ever) or more days")
    if days == 0:
        return None
    read_back = max(
        timedelta(hours=settings.forecast_history_hours + 1),
        # the report of a day runs the next day, and reads its savings hours and the plans before the day
        timedelta(days=2, hours=settings.cost_savings_window_hours) + PLAN_LOOKBACK,
    )
    return max(timedelta(days=days), read_back)


@dataclass(frozen=True)
class StorePruned:
    """What one pass removed (or would: a dry run); ``cutoff`` None when it kept everything (retention 0, or
    nothing published yet)."""

    cutoff: datetime | None
    metrics_hours: tuple[datetime, ...] = ()
    quarantined_hours: tuple[datetime, ...] = ()
    staging_folders: tuple[str, ...] = ()
    report_work_folders: tuple[str, ...] = ()
    plan_runs: tuple[str, ...] = ()
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The cut-off and how many of each (an XCom: small whatever the backlog)."""
        counts = {
            key: len(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()
        }
        return counts | {"cutoff": self.cutoff.isoformat() if self.cutoff else None}

    def summary(self) -> str:
        if self.cutoff is None:
            return "kept everything (retention 0, or no published hour yet)"
        verb = "would remove" if self.dry_run else "removed"
        parts = [
            f"{len(hours)} {what} hours{_span(hours)}"
            for what, hours in (("published", self.metrics_hours), ("quarantined", self.quarantined_hours))
        ]
        return (
            f"kept what ends after {self.cutoff.isoformat()}; {verb} {', '.join(parts)}, "
            f"{len(self.staging_folders)} staging folders, {len(self.report_work_folders)} cost report work "
            f"folders and {len(self.plan_runs)} plan folders"
        )


def _span(hours: tuple[datetime, ...]) -> str:
    if not hours:
        return ""
    return (
        f" ({hours[0]:%Y-%m-%dT%H})"
        if len(hours) == 1
        else f" ({hours[0]:%Y-%m-%dT%H} ... {hours[-1]:%Y-%m-%dT%H})"
    )


def prune_store(root: ObjectStoragePath, history: timedelta | None, dry_run: bool = False) -> StorePruned:
    """Remove what is older than ``history`` before the end of the newest published hour under ``root``
    (``dry_run``: say what, removing nothing)."""
    if history is None or (newest_end := store.latest_published_end(root)) is None:
        return StorePruned(None, dry_run=dry_run)
    cutoff = newest_end - history
    pruned = StorePruned(
        cutoff,
        metrics_hours=tuple(store.prune_hours(root, "metrics", cutoff, dry_run)),
        quarantined_hours=tuple(store.prune_hours(root, "quarantine", cutoff, dry_run)),
        staging_folders=tuple(store.prune_staging(root, cutoff, dry_run)),
        report_work_folders=tuple(prune_work_folders(root, cutoff, dry_run)),
        plan_runs=tuple(prune_runs(root, cutoff, dry_run)),
        dry_run=dry_run,
    )
    log.info("%s", pruned.summary())
    return pruned


def prune_configured_store(settings: Settings, dry_run: bool = False) -> StorePruned:
    """:func:`prune_store` under the settings' storage root and retention."""
    return prune_store(store.storage_path(settings.storage_root), store_history(settings), dry_run)
