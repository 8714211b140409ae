"""Partitioned Parquet under one storage root, written atomically.

Layout under the root (any fsspec URL, through Airflow's ``ObjectStoragePath``)::

    metrics/date=YYYY-MM-DD/hour=HH/{gpu.parquet,demand.parquet,_MANIFEST.json}
    quarantine/date=YYYY-MM-DD/hour=HH/{gpu.parquet,demand.parquet,validation.json,report.txt,data_docs/}
    _staging/<token>/...                          (never read by anyone but the writer)

A partition is *published* when its ``_MANIFEST.json`` exists; readers ignore a folder without one. Publishing
removes the old manifest, moves the new files in (a rename on a local disk; a single-object copy on an object
store, which readers never see half-written), then writes the manifest last. A crash at any point leaves either
the previous published partition, or a folder without a manifest that nobody reads and the next run replaces.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from airflow.sdk import ObjectStoragePath

MANIFEST = "_MANIFEST.json"
#: The files of one hour's partition (the layout above): GPU samples and pending GPU demand.
GPU_FILE = "gpu.parquet"
DEMAND_FILE = "demand.parquet"
PARQUET_META_PREFIX = "slicewise."


def storage_path(url: str) -> ObjectStoragePath:
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(url)


def partition_suffix(interval_start: datetime) -> str:
    return f"date={interval_start:%Y-%m-%d}/hour={interval_start:%H}"


@dataclass(frozen=True)
class PartitionPaths:
    root: ObjectStoragePath
    interval_start: datetime

    @property
    def published(self) -> ObjectStoragePath:
        return self.root / "metrics" / partition_suffix(self.interval_start)

    @property
    def quarantine(self) -> ObjectStoragePath:
        return self.root / "quarantine" / partition_suffix(self.interval_start)

    def new_staging(self) -> ObjectStoragePath:
        return self.root / "_staging" / f"{self.interval_start:%Y%m%dT%H}-{uuid.uuid4().hex[:12]}"


def hour_folders(root: ObjectStoragePath, area: str) -> list[tuple[datetime, ObjectStoragePath]]:
    """Every ``<area>/date=…/hour=…/`` folder under ``root`` (``metrics`` or ``quarantine``), published or not,
    with its hour's start, oldest first; folders named otherwise are not Slicewise's and are left out."""
    from datetime import UTC

    base = root / area
    if not base.exists():
        return []
    found = []
    for day in base.iterdir():
        if not day.is_dir():
            continue
        for hour in day.iterdir():
            try:
                stamp = datetime.strptime(f"{day.name}/{hour.name}", "date=%Y-%m-%d/hour=%H")
            except ValueError:
                continue
            found.append((stamp.replace(tzinfo=UTC), hour))
    return sorted(found, key=lambda item: item[0])


def published_hour_starts(root: ObjectStoragePath) -> list[datetime]:
    """Start of every hour under ``root`` with a published (validated) metrics partition, oldest first."""
    return [start for start, folder in hour_folders(root, "metrics") if read_manifest(folder) is not None]


def prune_hours(
    root: ObjectStoragePath, area: str, before: datetime, dry_run: bool = False
) -> list[datetime]:
    """Remove every hour folder of ``area`` whose hour ended at or before ``before``; returns their starts
    (``dry_run``: those it would remove, removing nothing).

    A published partition loses its manifest first, so a reader never sees it half removed, and a crash
    between the two leaves a folder nobody reads, which the next call removes. Day folders left empty go too.
    A folder another call removed meanwhile (overlapping runs) is skipped.
    """
    removed = []
    for start, folder in hour_folders(root, area):
        if start + timedelta(hours=1) > before:
            break
        if dry_run:
            removed.append(start)
            continue
        try:
            manifest = folder / MANIFEST
            if manifest.exists():
                manifest.unlink()
            remove(folder)
            removed.append(start)
            if not any(folder.parent.iterdir()):
                remove(folder.parent)
        except FileNotFoundError:
            continue
    return removed


def prune_folders(
    area: ObjectStoragePath,
    stamp: Callable[[str], datetime | None],
    before: datetime,
    dry_run: bool = False,
) -> list[str]:
    """Remove the entries of ``area`` whose ``stamp`` (read off the name; None: not to be removed) is before
    ``before``; returns their names in name order (``dry_run``: removing nothing)."""
    if not area.exists():
        return []
    removed = []
    for entry in sorted(area.iterdir(), key=lambda path: path.name):
        stamped = stamp(entry.name)
        if stamped is not None and stamped < before:
            if not dry_run:
                remove(entry)
            removed.append(entry.name)
    return removed


def prune_staging(root: ObjectStoragePath, before: datetime, dry_run: bool = False) -> list[str]:
    """Remove the staging folders of hours that began before ``before`` (left by attempts that crashed and were
    never retried; a retry removes its own hour's); returns their names (``dry_run``: removing nothing). Other
    writers' staging, named otherwise, is theirs."""
    return prune_folders(root / "_staging", _staging_hour, before, dry_run)


def _staging_hour(name: str) -> datetime | None:
    from datetime import UTC

    try:
        return datetime.strptime(name.split("-", 1)[0], "%Y%m%dT%H").replace(tzinfo=UTC)
    except ValueError:
        return None


def latest_published_end(root: ObjectStoragePath) -> datetime | None:
    """End of the newest published hour under ``root`` (None before the first), for runs without an event and
    for the store's retention. Reads manifests newest first and stops at the first: one read, not one per hour
    kept."""
    for start, folder in reversed(hour_folders(root, "metrics")):
        if read_manifest(folder) is not None:
            return start + timedelta(hours=1)
    return None


def write_frame(frame: pd.DataFrame, path: ObjectStoragePath, metadata: Mapping[str, str]) -> None:
    """Write ``frame`` as Parquet with ``metadata`` in the file's key-value metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    existing = table.schema.metadata or {}
    extra = {f"{PARQUET_META_PREFIX}{k}".encode(): str(v).encode() for k, v in metadata.items()}
    table = table.replace_schema_metadata({**existing, **extra})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


def read_frame(path: ObjectStoragePath | str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Read a Parquet file written by :func:`write_frame`; returns the frame and Slicewise's metadata."""
    import pyarrow.parquet as pq

    source = storage_path(path) if isinstance(path, str) else path
    with source.open("rb") as handle:
        table = pq.read_table(handle)
    meta = {
        k.decode()[len(PARQUET_META_PREFIX) :]: v.decode()
        for k, v in (table.schema.metadata or {}).items()
        if k.decode().startswith(PARQUET_META_PREFIX)
    }
    return table.to_pandas(), meta


def read_manifest(folder: ObjectStoragePath) -> dict[str, Any] | None:
    manifest = folder / MANIFEST
    if not manifest.exists():
        return None
    data: dict[str, Any] = json.loads(manifest.read_text())
    return data


def publish(staging: ObjectStoragePath, target: ObjectStoragePath, manifest: Mapping[str, Any]) -> None:
    """Move every file of ``staging`` into ``target`` and mark it published (see the module docstring)."""
    target.mkdir(parents=True, exist_ok=True)
    old_manifest = target / MANIFEST
    if old_manifest.exists():
        old_manifest.unlink()
    incoming = {item.name: item for item in staging.iterdir()}
    for leftover in target.iterdir():
        if leftover.name not in incoming:  # from an earlier version of this partition
            remove(leftover)
    for name, item in incoming.items():
        destination = target / name
        if destination.exists():
            remove(destination)
        item.rename(destination)
    (target / MANIFEST).write_text(json.dumps(dict(manifest), indent=2, sort_keys=True, default=str))
    remove(staging)


def move_folder(source: ObjectStoragePath, target: ObjectStoragePath) -> None:
    """Replace ``target`` with the contents of ``source`` (used for quarantine, which has no readers)."""
    if target.exists():
        remove(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    source.rename(target)


def remove(path: ObjectStoragePath) -> None:
    """Remove a file or a folder with everything in it (nothing when absent)."""
    if path.is_dir():
        path.fs.rm(path.path, recursive=True)
    elif path.exists():
        path.unlink()
