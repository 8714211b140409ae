"""``gpu_whatif_review`` end to end with ``dag.test()``: validated hours of the simulated fleet replayed under
every consolidation mode and published; a week without validated hours skips with the reason."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from slicewise import store
from slicewise.simulator.fleet import Fleet
from tests.support.partitions import publish_hour

pytestmark = pytest.mark.integration

DAG_ID = "gpu_whatif_review"
DAY = datetime(2026, 11, 24, tzinfo=UTC)
_RUN_SECONDS = itertools.count()  # dag.test names runs after run_after: one second each, no collisions


@pytest.fixture
def root(tmp_path: Path, airflow_db: None, monkeypatch: pytest.MonkeyPatch) -> store.ObjectStoragePath:
    root = store.storage_path((tmp_path / "store").as_uri())
    for hour in range(3):
        publish_hour(root, Fleet.default(), DAY + timedelta(hours=hour))
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", root.as_uri())
    return root


def run_dag(**conf: Any) -> dict[str, str]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags" / f"{DAG_ID}.py"))
    dag = bag.get_dag(DAG_ID)
    assert dag is not None, bag.import_errors
    for task in dag.tasks:
        task.retries = 0
    run = dag.test(run_after=DAY + timedelta(days=2, seconds=next(_RUN_SECONDS)), run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()} | {"__run__": run.state}


def test_a_week_of_validated_hours_is_replayed_and_published(root: store.ObjectStoragePath) -> None:
    states = run_dag(
        days=1,
        until="2026-11-24T12",
        scheduler="binpack",
        consolidation="whole-gpus,nodes",
        compare_standby=False,
        compare_whole_gpu_demand=False,
        compare_mps_release_below=[1],
        scale_down_unneeded_s=600,
        scale_down_utilization_threshold=0.25,
        scale_down_delay_after_add_s=120,
        evictable="all",
    )
    assert states == {"replay_history": "success", "__run__": "success"}
    folder = root / "whatif" / "2026-11-23T12_2026-11-24T12"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["hours"] == {"read": 3, "missing_or_quarantined": 21, "unreadable": 0}
    assert list(summary["policies"]) == [
        "static",
        "static-shared",  # the autoscaler's node group shared by MPS, without the planner
        "packing/whole-gpus",
        "packing/nodes",
        "packing, MPS release below 1",  # the Param's value, in the cluster's mode (whole-gpus)
        "ideal",
    ]
    [line] = summary["mps_release_choice"]
    assert line.startswith("packing with MPS release below 0.25 (the setting): ")
    assert (summary["model"]["scheduler"], summary["model"]["evictable"]) == ("binpack", "all")
    # The autoscaler Params reach the replay.
    assert (
        summary["model"]["scale_down_unneeded_s"],
        summary["model"]["scale_down_utilization_threshold"],
        summary["model"]["scale_down_delay_after_add_s"],
    ) == (600, 0.25, 120)
    assert summary["consolidation_choice"][0].startswith("packing: least wait with planner_consolidation=")
    assert (folder / "report.html").read_text().startswith("<!doctype html>")


def test_a_week_without_validated_hours_skips_with_the_reason(root: store.ObjectStoragePath) -> None:
    states = run_dag(days=1, until="2026-11-23T00")
    assert states["replay_history"] == "skipped"
    assert not (root / "whatif").exists()
