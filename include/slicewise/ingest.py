"""One hour of metrics, as a transaction: pull into staging, validate, then publish or quarantine.

Each step takes and returns plain values (URLs, counts) so the ingest DAG can run them as separate tasks and
show progress per step in the Airflow UI. Nothing outside ``_staging/`` is written before validation decides.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from slicewise import schema, store
from slicewise.errors import PermanentError

if TYPE_CHECKING:
    import pandas as pd
    from airflow.sdk import ObjectStoragePath

    from slicewise.settings import Settings

log = logging.getLogger(__name__)


class MetricsSource(Protocol):
    """Where an hour of metrics comes from (the real one is :class:`slicewise.metrics.prometheus.PrometheusReader`)."""

    def gpu_samples(self, start: datetime, end: datetime) -> pd.DataFrame: ...

    def demand(self, start: datetime, end: datetime) -> pd.DataFrame: ...


class ValidationFailed(PermanentError, RuntimeError):
    """The partition failed validation and was quarantined; the message is the human-readable summary."""


@dataclass(frozen=True)
class Staged:
    staging_url: str
    gpu_rows: int
    gpu_series: int
    demand_rows: int


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"interval bound {moment} has no timezone")
    # A plain datetime: pendulum's (what Airflow hands tasks) mixes badly with stdlib timezone arithmetic.
    return datetime.fromtimestamp(moment.timestamp(), tz=UTC)


def _meta(kind: str, start: datetime, end: datetime, settings: Settings) -> dict[str, str]:
    return {
        "kind": kind,
        "interval_start": start.isoformat(),
        "interval_end": end.isoformat(),
        "step_s": str(settings.step_s),
    }


def pull(source: MetricsSource, start: datetime, end: datetime, settings: Settings) -> Staged:
    """Read ``[start, end)`` from ``source`` and write it under a fresh staging folder.

    Both frames are read before anything is written, so an unreachable or slow source writes nothing.
    Staging left behind by an earlier crashed attempt at the same hour is removed.
    """
    start, end = _utc(start), _utc(end)
    gpu = source.gpu_samples(start, end)
    demand = source.demand(start, end)
    paths = store.PartitionPaths(store.storage_path(settings.storage_root), start)
    _remove_stale_staging(paths)
    staging = paths.new_staging()
    store.write_frame(gpu, staging / store.GPU_FILE, _meta("gpu", start, end, settings))
    store.write_frame(demand, staging / store.DEMAND_FILE, _meta("demand", start, end, settings))
    series = int(gpu[list(schema.GPU_KEY)].drop_duplicates().shape[0]) if len(gpu) else 0
    log.info(
        "staged %d GPU rows (%d series) and %d demand rows at %s", len(gpu), series, len(demand), staging
    )
    return Staged(str(staging), len(gpu), series, len(demand))


def _remove_stale_staging(paths: store.PartitionPaths) -> None:
    staging_root = paths.root / "_staging"
    if not staging_root.exists():
        return
    prefix = f"{paths.interval_start:%Y%m%dT%H}-"
    for leftover in staging_root.iterdir():
        if leftover.name.startswith(prefix):
            log.info("removing staging left by an earlier attempt: %s", leftover)
            leftover.fs.rm(leftover.path, recursive=True)


def previous_keys(root: ObjectStoragePath, start: datetime) -> pd.DataFrame | None:
    """Distinct GPU series of the previous hour's *published* partition, or None when there is none."""
    from datetime import timedelta

    previous = store.PartitionPaths(root, start - timedelta(hours=1)).published
    if store.read_manifest(previous) is None:
        return None
    frame, _ = store.read_frame(previous / store.GPU_FILE)
    return frame[list(schema.GPU_KEY)].drop_duplicates().reset_index(drop=True)


def validate(staging_url: str, start: datetime, end: datetime, settings: Settings) -> dict[str, Any]:
    """Validate a staged partition. Valid: returns the statistics. Invalid: quarantines it with the GX result,
    Data Docs and a readable report, and raises :class:`ValidationFailed` with the summary."""
    from slicewise import validation

    start, end = _utc(start), _utc(end)
    staging = store.storage_path(staging_url)
    gpu, _ = store.read_frame(staging / store.GPU_FILE)
    demand, _ = store.read_frame(staging / store.DEMAND_FILE)
    root = store.storage_path(settings.storage_root)
    report = validation.combine(
        validation.validate_gpu_frame(
            gpu,
            interval_start=start,
            interval_end=end,
            step_s=settings.step_s,
            settings=settings,
            previous_keys=previous_keys(root, start),
        ),
        validation.validate_demand_frame(demand, interval_start=start, interval_end=end),
    )
    if report.success:
        log.info("partition valid: %s", report.summary())
        return dict(report.statistics)
    (staging / "validation.json").write_text(json.dumps(report.to_json(), indent=2, default=str))
    (staging / "report.txt").write_text(report.summary() + "\n")
    _write_data_docs(report, staging)
    target = store.PartitionPaths(root, start).quarantine
    store.move_folder(staging, target)
    raise ValidationFailed(f"partition {start:%Y-%m-%d %H:00} quarantined at {target}:\n{report.summary()}")


def _write_data_docs(report: Any, staging: ObjectStoragePath) -> None:
    """GX builds Data Docs on a local disk; copy them next to the quarantined data wherever storage is."""
    import tempfile
    from pathlib import Path

    from slicewise import validation

    with tempfile.TemporaryDirectory() as tmp:
        built = validation.write_data_docs(report, Path(tmp) / "data_docs")
        for file in built.rglob("*"):
            if file.is_file():
                target = staging / "data_docs" / str(file.relative_to(built))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(file.read_bytes())


def publish(
    staging_url: str,
    start: datetime,
    end: datetime,
    staged: Staged,
    statistics: dict[str, Any],
    settings: Settings,
) -> dict[str, Any]:
    """Publish a validated staging folder as the hour's partition; returns its manifest."""
    start, end = _utc(start), _utc(end)
    root = store.storage_path(settings.storage_root)
    target = store.PartitionPaths(root, start).published
    manifest = {
        "interval_start": start.isoformat(),
        "interval_end": end.isoformat(),
        "step_s": settings.step_s,
        "gpu_rows": staged.gpu_rows,
        "gpu_series": staged.gpu_series,
        "demand_rows": staged.demand_rows,
        "validation": statistics,
        "published_at": datetime.now(UTC).isoformat(),
        "path": str(target),
    }
    store.publish(store.storage_path(staging_url), target, manifest)
    log.info("published %s", target)
    return manifest


def staged_from_dict(values: dict[str, Any]) -> Staged:
    return Staged(**values)


def staged_to_dict(staged: Staged) -> dict[str, Any]:
    return asdict(staged)
