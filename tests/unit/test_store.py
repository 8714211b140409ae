"""Partition storage: Parquet with metadata, atomic publish, quarantine."""

from __future__ import annotations

from datetime import UTC, datetime
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
