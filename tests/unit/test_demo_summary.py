"""What the demo prints: progress of a run, and for a run that failed the failing task and its exception."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slicewise.demo_summary import failures


def _attempt(folder: Path, number: int, events: list[dict[str, object]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(e) for e in events] + ["not json: a line a library printed"]
    (folder / f"attempt={number}.log").write_text("\n".join(lines) + "\n")


def test_the_latest_attempt_of_each_failed_task_is_reported_with_its_exception(tmp_path: Path) -> None:
    run = tmp_path / "dag_id=gpu_partition_rollout" / "run_id=manual__1"
    failed = {
        "event": "Task failed with exception",
        "error_detail": [
            {"exc_type": "OSError", "exc_value": "disk gone", "is_cause": True},
            {"exc_type": "ClusterError", "exc_value": "state file unreadable", "is_cause": False},
        ],
    }
    _attempt(run / "task_id=observe_cluster", 1, [{"event": "start"}, failed])
    _attempt(run / "task_id=observe_cluster", 2, [failed])
    # Failed once, then succeeded: not a failure of the run.
    _attempt(run / "task_id=forecast", 1, [failed])
    _attempt(run / "task_id=forecast", 2, [{"event": "Task instance in success state"}])
    _attempt(run / "task_id=plan_nodes", 10, [failed])  # attempt 10 sorts after 2, not before

    assert failures(tmp_path, "gpu_partition_rollout", "manual__1") == [
        "observe_cluster: ClusterError: state file unreadable",
        "plan_nodes: ClusterError: state file unreadable",
    ]
    assert failures(tmp_path, "gpu_partition_rollout", "no_such_run") == []


def test_the_progress_line_counts_what_is_done_and_names_only_what_is_happening() -> None:
    from slicewise.demo import progress

    states = {
        "forecast": "success",
        "publish_plan": "skipped",
        "wave_0.apply": "running",
        "wave_0.analyse": "none",
        "wave_1.apply": "upstream_failed",
        "wave_1.ask_person": "deferred",
        "rollback": "failed",
    }
    assert progress(states) == (
        "2/7 tasks done, 1 upstream_failed  wave_0.apply=running  wave_1.ask_person=deferred  rollback=failed"
    )
    assert progress({}) == "0/0 tasks done"


def test_the_summary_tells_the_runs_changes_outside_the_waves_and_no_other_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slicewise import store
    from slicewise.demo_summary import changes
    from slicewise.planning import storage
    from slicewise.planning.types import FleetPlan
    from slicewise.rollout.ledger import Ledger
    from slicewise.rollout.ledger.url import ledger_url
    from slicewise.settings import load_settings

    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    settings = load_settings()
    root = store.storage_path(settings.storage_root)
    storage.write_plan(storage.run_folder(root, "manual__2"), FleetPlan("packing", "v3", True, 60, ()))
    storage.mark_latest(root, "manual__2", datetime(2026, 12, 7, 5, tzinfo=UTC))
    with Ledger.open(ledger_url(settings)) as ledger:
        at = datetime(2026, 12, 7, 5, tzinfo=UTC)
        ledger.add_marks("simulated:x", "gpu_partition_rollout/manual__1", [("holds", "an older run's")], at)
        ledger.add_marks(
            "simulated:x",
            "gpu_partition_rollout/manual__2",
            [("standby", "slicewise.io/standby: added on n1"), ("pod moves", "evicted a/p")],
            at,
        )

    told = changes(settings, "", "manual__2")

    assert told[0].startswith("plan (packing, forecaster v3): ")
    assert told[1:] == [
        "  outside the waves, standby: slicewise.io/standby: added on n1",
        "  outside the waves, pod moves: evicted a/p",
        "rollout: none (nothing to change, or recommend mode)",
    ]
    assert not any("older run" in line for line in told)
