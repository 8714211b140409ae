"""Partition storage: Parquet with metadata, atomic publish, quarantine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from slicewise import store

HOUR = datetime(2026, 11, 29, 10, tzinfo=UTC)


@pytest.fixture
def root(tmp_path: Path) -> store.ObjectStoragePath:
    return store.storage_path(tmp_path.as_uri())


def test_frame_and_metadata_round_trip(root: store.ObjectStoragePath) -> None:
    frame = pd.DataFrame({"a": [1, 2], "b": pd.array(["x", ""], dtype="string")})
    store.write_frame(frame, root / "f.parquet", {"kind": "gpu", "step_s": "60"})
    read, meta = store.read_frame(root / "f.parquet")
    pd.testing.assert_frame_equal(read, frame)
    assert meta == {"kind": "gpu", "step_s": "60"}


def test_partition_paths_are_hive_style_per_hour(root: store.ObjectStoragePath) -> None:
    paths = store.PartitionPaths(root, HOUR)
    assert str(paths.published).endswith("metrics/date=2026-11-29/hour=10")
    assert str(paths.quarantine).endswith("quarantine/date=2026-11-29/hour=10")
    assert paths.new_staging() != paths.new_staging()


def test_publish_replaces_the_previous_partition_and_writes_the_manifest_last(
    root: store.ObjectStoragePath,
) -> None:
    paths = store.PartitionPaths(root, HOUR)
    first = paths.new_staging()
    (first / "gpu.parquet").parent.mkdir(parents=True)
    (first / "gpu.parquet").write_text("old")
    (first / "stale-only-in-first.txt").write_text("x")
    store.publish(first, paths.published, {"run": 1})

    second = paths.new_staging()
    second.mkdir(parents=True)
    (second / "gpu.parquet").write_text("new")
    store.publish(second, paths.published, {"run": 2})

    assert (paths.published / "gpu.parquet").read_text() == "new"
    assert sorted(p.name for p in paths.published.iterdir()) == [store.MANIFEST, "gpu.parquet"]
    assert store.read_manifest(paths.published) == {"run": 2}
    assert not first.exists() and not second.exists()


def test_a_folder_without_manifest_counts_as_unpublished(root: store.ObjectStoragePath) -> None:
    folder = store.PartitionPaths(root, HOUR).published
    folder.mkdir(parents=True)
    (folder / "gpu.parquet").write_text("half")  # what a crash between the moves and the manifest leaves
    assert store.read_manifest(folder) is None


def test_move_folder_replaces_an_earlier_quarantine(root: store.ObjectStoragePath) -> None:
    paths = store.PartitionPaths(root, HOUR)
    for content in ("first", "second"):
        staging = paths.new_staging()
        staging.mkdir(parents=True)
        (staging / "report.txt").write_text(content)
        store.move_folder(staging, paths.quarantine)
    assert (paths.quarantine / "report.txt").read_text() == "second"
    assert [p.name for p in paths.quarantine.iterdir()] == ["report.txt"]


def test_published_hour_starts_lists_only_hours_with_a_manifest_oldest_first(
    root: store.ObjectStoragePath,
) -> None:
    assert store.published_hour_starts(root) == []
    for hour in (HOUR.replace(hour=14), HOUR.replace(day=28, hour=23), HOUR):
        staging = store.PartitionPaths(root, hour).new_staging()
        staging.mkdir(parents=True)
        store.publish(staging, store.PartitionPaths(root, hour).published, {})
    half = store.PartitionPaths(root, HOUR.replace(hour=15)).published  # a crash before its manifest
    half.mkdir(parents=True)
    (half / "gpu.parquet").write_text("half")
    assert store.published_hour_starts(root) == [HOUR.replace(day=28, hour=23), HOUR, HOUR.replace(hour=14)]
    assert store.latest_published_end(root) == HOUR.replace(hour=15)  # the newer half-written hour is no end


def _publish(root: store.ObjectStoragePath, hour: datetime) -> store.ObjectStoragePath:
    paths = store.PartitionPaths(root, hour)
    staging = paths.new_staging()
    staging.mkdir(parents=True)
    (staging / store.GPU_FILE).write_text(hour.isoformat())
    store.publish(staging, paths.published, {})
    return paths.published


def test_prune_hours_removes_the_hours_ended_by_the_cutoff_and_their_emptied_days(
    root: store.ObjectStoragePath,
) -> None:
    late_evening, night = HOUR.replace(day=28, hour=22), HOUR.replace(day=28, hour=23)
    for hour in (late_evening, night, HOUR):
        _publish(root, hour)
    half = store.PartitionPaths(root, HOUR.replace(day=27)).published  # a crash before its manifest
    half.mkdir(parents=True)
    (half / store.GPU_FILE).write_text("half")
    (root / "metrics" / "notes").mkdir()  # not an hour of Slicewise's: left alone

    # An hour is kept while any of it is after the cutoff.
    assert store.prune_hours(root, "metrics", night + timedelta(minutes=59)) == [
        HOUR.replace(day=27),
        late_evening,
    ]
    assert store.published_hour_starts(root) == [night, HOUR]
    assert store.prune_hours(root, "metrics", HOUR) == [night]
    assert sorted(p.name for p in (root / "metrics").iterdir()) == ["date=2026-11-29", "notes"]
    assert (store.PartitionPaths(root, HOUR).published / store.GPU_FILE).read_text() == HOUR.isoformat()
    assert store.prune_hours(root, "quarantine", HOUR) == []  # nothing quarantined yet


def test_prune_staging_removes_only_the_ingest_staging_of_hours_before_the_cutoff(
    root: store.ObjectStoragePath,
) -> None:
    old = store.PartitionPaths(root, HOUR - timedelta(hours=1)).new_staging()
    current = store.PartitionPaths(root, HOUR).new_staging()
    others = root / "_staging" / "cost_report" / "2026-11-01-abc"  # another writer's scratch space
    for folder in (old, current, others):
        folder.mkdir(parents=True)
    assert store.prune_staging(root, HOUR, dry_run=True) == [old.name] and old.exists()
    assert store.prune_staging(root, HOUR) == [old.name]
    assert not old.exists() and current.exists() and others.exists()
