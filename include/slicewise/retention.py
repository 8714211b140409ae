"""How long the store keeps its hourly data (setting ``store_retention_days``): the ingest DAG's ``prune_store``.

Each run of ``gpu_metrics_ingest`` that publishes an hour then removes, under the storage root, what is older
than the retention counted back from the newest published hour (as Prometheus counts its own retention back
from its newest sample, so a fleet that stops reporting keeps its last days): hourly partitions under
``metrics/`` and ``quarantine/``, the ingest's staging left by attempts never retried, and the planner's
``plans/<run>/`` folders (never the newest plan's). Cost reports and what-if reviews are small, one a day or
less, and are kept. The retention is never shorter than what the DAGs read back: the forecaster's
``forecast_history_hours``, and the daily cost report's day with its savings hours and the planner runs before
it (:data:`slicewise.costs.sources.PLAN_LOOKBACK`), a day late.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise import store
from slicewise.costs.sources import PLAN_LOOKBACK
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
    """What one pass removed; ``cutoff`` None when it kept everything (retention 0, or nothing published)."""

    cutoff: datetime | None
    metrics_hours: int = 0
    quarantined_hours: int = 0
    staging_folders: int = 0
    plan_runs: int = 0

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["cutoff"] = self.cutoff.isoformat() if self.cutoff else None
        return values


def prune_store(root: ObjectStoragePath, history: timedelta | None) -> StorePruned:
    """Remove what is older than ``history`` before the end of the newest published hour under ``root``."""
    published = store.published_hour_starts(root)
    if history is None or not published:
        return StorePruned(None)
    cutoff = published[-1] + timedelta(hours=1) - history
    pruned = StorePruned(
        cutoff,
        metrics_hours=len(store.prune_hours(root, "metrics", cutoff)),
        quarantined_hours=len(store.prune_hours(root, "quarantine", cutoff)),
        staging_folders=store.prune_staging(root, cutoff),
        plan_runs=len(prune_runs(root, cutoff)),
    )
    log.info(
        "kept what ends after %s; removed %d published and %d quarantined hours, %d staging and %d plan folders",
        cutoff.isoformat(),
        pruned.metrics_hours,
        pruned.quarantined_hours,
        pruned.staging_folders,
        pruned.plan_runs,
    )
    return pruned


def prune_configured_store(settings: Settings) -> StorePruned:
    """:func:`prune_store` under the settings' storage root and retention."""
    return prune_store(store.storage_path(settings.storage_root), store_history(settings))
