"""The store's retention: what a pass removes, counted back from the newest published hour, and its floor."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slicewise import store
from slicewise.planning import storage
from slicewise.planning.types import FleetPlan
from slicewise.retention import StorePruned, prune_configured_store, prune_store, store_history
from slicewise.settings import Settings, SettingsError, load_settings

NEWEST = datetime(2026, 11, 29, 10, tzinfo=UTC)


def _settings(tmp_path: Path, **overrides: object) -> Settings:
    return load_settings(None, {"storage_root": tmp_path.as_uri(), **overrides})


def test_the_retention_is_never_shorter_than_what_the_dags_read_back(tmp_path: Path) -> None:
    assert store_history(_settings(tmp_path, store_retention_days=35)) == timedelta(days=35)
    assert store_history(_settings(tmp_path, store_retention_days=0)) is None
    # The daily cost report: its day, a day late, its savings hours and the planner runs two days before it.
    floor = _settings(tmp_path, store_retention_days=1, cost_savings_window_hours=5)
    assert store_history(floor) == timedelta(days=4, hours=5)
    # The forecaster's history, when it reads back further.
    long_history = _settings(tmp_path, store_retention_days=1, forecast_history_hours=200)
    assert store_history(long_history) == timedelta(hours=201)
    for bad in (-1, float("nan")):
        with pytest.raises(SettingsError, match="store_retention_days"):
            store_history(_settings(tmp_path, store_retention_days=bad))


def _hour(root: store.ObjectStoragePath, start: datetime, area: str = "metrics") -> None:
    paths = store.PartitionPaths(root, start)
    staging = paths.new_staging()
    staging.mkdir(parents=True)
    (staging / store.GPU_FILE).write_text(start.isoformat())
    if area == "metrics":
        store.publish(staging, paths.published, {})
    else:
        store.move_folder(staging, paths.quarantine)


def test_a_pass_removes_hours_staging_and_plans_older_than_the_retention_before_the_newest_hour(
    tmp_path: Path,
) -> None:
    root = store.storage_path(tmp_path.as_uri())
    history = timedelta(days=5)
    days_back = [6, 5, 1, 0]  # days before the newest hour
    for back in days_back:
        _hour(root, NEWEST - timedelta(days=back))
    _hour(root, NEWEST - timedelta(days=7), "quarantine")
    _hour(root, NEWEST - timedelta(days=2), "quarantine")
    crashed = store.PartitionPaths(root, NEWEST - timedelta(days=8)).new_staging()  # never retried
    crashed.mkdir(parents=True)
    failed_reports = [root / "_staging" / "cost_report" / f"2026-11-{day}-scheduled__x" for day in (23, 24)]
    for folder in failed_reports:  # the day that ended at the cut-off goes, the next is kept
        folder.mkdir(parents=True)
    for back in (6, 3):
        run = f"scheduled__{NEWEST - timedelta(days=back):%Y-%m-%dT%H:%M:%S}+00:00"
        storage.write_plan(storage.run_folder(root, run), FleetPlan("packing", "v1", True, 60, ()))
    storage.mark_latest(root, f"scheduled__{NEWEST - timedelta(days=3):%Y-%m-%dT%H:%M:%S}+00:00", NEWEST)

    cutoff = NEWEST + timedelta(hours=1) - history
    expected = StorePruned(
        cutoff,
        metrics_hours=(NEWEST - timedelta(days=6), NEWEST - timedelta(days=5)),
        quarantined_hours=(NEWEST - timedelta(days=7),),
        staging_folders=(crashed.name,),
        report_work_folders=(failed_reports[0].name,),
        plan_runs=(
            storage.run_folder(root, f"scheduled__{NEWEST - timedelta(days=6):%Y-%m-%dT%H:%M:%S}+00:00").name,
        ),
    )
    dry = prune_store(root, history, dry_run=True)
    assert dry == dataclasses.replace(expected, dry_run=True)
    assert dry.summary() == (
        f"kept what ends after {cutoff.isoformat()}; would remove 2 published hours (2026-11-23T10 ... "
        "2026-11-24T10), 1 quarantined hours (2026-11-22T10), 1 staging folders, 1 cost report work folders and "
        "1 plan folders"
    )
    assert len(store.published_hour_starts(root)) == 4 and crashed.exists()  # a dry run removes nothing

    pruned = prune_store(root, history)

    assert pruned == expected
    # Five days of hours are kept: the one that began five days before the newest ended at the cutoff.
    assert store.published_hour_starts(root) == [NEWEST - timedelta(days=1), NEWEST]
    assert [start for start, _ in store.hour_folders(root, "quarantine")] == [NEWEST - timedelta(days=2)]
    assert not crashed.exists() and not failed_reports[0].exists() and failed_reports[1].exists()
    assert len([p for p in (root / "plans").iterdir() if p.is_dir()]) == 1
    assert pruned.as_dict() == {
        "cutoff": cutoff.isoformat(),
        "metrics_hours": 2,
        "quarantined_hours": 1,
        "staging_folders": 1,
        "report_work_folders": 1,
        "plan_runs": 1,
        "dry_run": False,
    }
    assert prune_store(root, history) == StorePruned(cutoff)  # a second pass finds nothing more


def test_nothing_is_removed_before_the_first_published_hour_or_with_a_retention_of_zero(
    tmp_path: Path,
) -> None:
    root = store.storage_path(tmp_path.as_uri())
    _hour(root, NEWEST - timedelta(days=400), "quarantine")  # only bad hours so far
    assert prune_store(root, timedelta(days=5)) == StorePruned(None)
    _hour(root, NEWEST - timedelta(days=300))
    _hour(root, NEWEST)
    assert prune_configured_store(_settings(tmp_path, store_retention_days=0)) == StorePruned(None)
    assert len(store.published_hour_starts(root)) == 2
    assert prune_configured_store(_settings(tmp_path)).metrics_hours == (NEWEST - timedelta(days=300),)
    assert len(store.hour_folders(root, "quarantine")) == 0


def test_the_cli_says_what_a_dry_run_would_remove_then_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from slicewise.cli import main

    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", tmp_path.as_uri())
    root = store.storage_path(tmp_path.as_uri())
    for back in (40, 10, 0):
        _hour(root, NEWEST - timedelta(days=back))
    capsys.readouterr()

    assert main(["store", "prune", "--dry-run"]) == 0
    assert "would remove 1 published hours (2026-10-20T10)" in capsys.readouterr().out
    assert len(store.published_hour_starts(root)) == 3
    assert main(["store", "prune", "--days", "5"]) == 0  # this run's retention, not the setting's 35
    assert "removed 2 published hours (2026-10-20T10 ... 2026-11-19T10)" in capsys.readouterr().out
    assert store.published_hour_starts(root) == [NEWEST]
    assert main(["store", "prune", "--days", "-1"]) == 2
    assert "error: setting store_retention_days=-1.0" in capsys.readouterr().err
