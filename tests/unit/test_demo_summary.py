"""What the demo prints: progress of a run, and for a run that failed the failing task and its exception."""

from __future__ import annotations

import json
from pathlib import Path

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
