"""The ingest DAG end to end: real Prometheus with backfilled simulated data, real Airflow runs (dag.test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from slicewise import schema, store
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.frames import demand as simulated_demand
from slicewise.simulator.frames import gpu_samples as simulated_gpu_samples
from slicewise.stack import processes
from slicewise.store import DEMAND_FILE, GPU_FILE
from tests.support.assets import asset_events

from .conftest import FAULTY_NODE, PrometheusWithHistory, fault_hour, hour

pytestmark = pytest.mark.integration
DAG_ID = "gpu_metrics_ingest"


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> store.ObjectStoragePath:
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", tmp_path.as_uri())
    return store.storage_path(tmp_path.as_uri())


@pytest.fixture
def connected(
    prometheus: PrometheusWithHistory, airflow_db: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PrometheusWithHistory]:
    monkeypatch.setenv(
        "AIRFLOW_CONN_PROMETHEUS_DEFAULT",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": prometheus.port}),
    )
    yield prometheus


def ingest_dag(retries: int | None = None) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags" / f"{DAG_ID}.py"))
    dag = bag.get_dag(DAG_ID)
    assert dag is not None, bag.import_errors
    if retries is not None:  # dag.test() would otherwise wait out the retry delays
        for task in dag.tasks:
            task.retries = retries
    return dag


def run_hour(start: datetime, retries: int | None = None) -> dict[str, Any]:
    """Run the DAG for the hour starting at ``start`` (a manual run owns the hour that ends at its date)."""
    run = ingest_dag(retries).test(logical_date=start + timedelta(hours=1))
    assert (run.data_interval_start, run.data_interval_end) == (start, start + timedelta(hours=1))
    states: dict[str, Any] = {ti.task_id: ti.state for ti in run.get_task_instances()}
    return states | {"__run__": run.state, "__events__": asset_events(run.run_id)}


def timestamps_of(start: datetime) -> np.ndarray:
    return np.arange(int(start.timestamp()), int((start + timedelta(hours=1)).timestamp()), 60)


def test_an_hour_is_pulled_validated_and_published_exactly_as_simulated(
    connected: PrometheusWithHistory, storage: store.ObjectStoragePath
) -> None:
    start = hour(1)
    states = run_hour(start)
    events = states.pop("__events__")
    assert states == {
        "pull_metrics": "success",
        "validate_partition": "success",
        "publish_partition": "success",
        "prune_store": "success",
        "__run__": "success",
    }

    folder = store.PartitionPaths(storage, start).published
    manifest = store.read_manifest(folder)
    assert manifest is not None
    got, meta = store.read_frame(folder / GPU_FILE)
    expected = simulated_gpu_samples(connected.fleet, timestamps_of(start))
    assert meta["interval_start"] == start.isoformat()
    assert manifest["gpu_rows"] == len(expected) == len(got)
    assert manifest["gpu_series"] == expected[list(schema.GPU_KEY)].drop_duplicates().shape[0]
    key = [*schema.GPU_KEY, schema.TIMESTAMP]
    pd.testing.assert_frame_equal(
        got.sort_values(key, ignore_index=True),
        expected.sort_values(key, ignore_index=True),
        check_exact=False,
        rtol=1e-9,
    )

    demand, _ = store.read_frame(folder / DEMAND_FILE)
    expected_demand = simulated_demand(connected.fleet, timestamps_of(start))
    demand_key = [schema.TIMESTAMP, *schema.DEMAND_LABELS]
    pd.testing.assert_frame_equal(
        demand.sort_values(demand_key, ignore_index=True),
        expected_demand.sort_values(demand_key, ignore_index=True),
    )
    assert not (storage / "quarantine").exists()
    assert len(events) == 1
    assert events[0]["gpu_rows"] == len(expected) and events[0]["gpu_series"] == manifest["gpu_series"]
    assert events[0]["demand_rows"] == len(expected_demand)
    assert events[0]["interval_start"] == start.isoformat()


def test_a_rerun_replaces_the_partition_without_duplicating_anything(
    connected: PrometheusWithHistory, storage: store.ObjectStoragePath
) -> None:
    start = hour(2)
    # Hours older than store_retention_days (35) before the newest published one go once an hour is published.
    expired = store.PartitionPaths(storage, start - timedelta(days=36))
    published = expired.new_staging()
    published.mkdir(parents=True)
    store.publish(published, expired.published, {})
    for folder in (expired.new_staging(), expired.quarantine):  # staging never retried, a quarantined hour
        folder.mkdir(parents=True)
    assert run_hour(start)["__run__"] == "success"
    assert store.published_hour_starts(storage) == [start]
    assert store.hour_folders(storage, "quarantine") == [] and not any((storage / "_staging").iterdir())
    folder = store.PartitionPaths(storage, start).published
    first, _ = store.read_frame(folder / GPU_FILE)
    assert run_hour(start)["__run__"] == "success"
    second, _ = store.read_frame(folder / GPU_FILE)
    pd.testing.assert_frame_equal(first, second)
    assert sorted(p.name for p in folder.iterdir()) == sorted([GPU_FILE, DEMAND_FILE, store.MANIFEST])
    assert [p.name for p in (storage / "metrics").iterdir()] == [f"date={start:%Y-%m-%d}"]
    assert not any((storage / "_staging").iterdir())


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("nan", "engine_active"),
        ("out_of_range", "engine_active outside 0-1"),
        ("duplicate_pod", "duplicate"),
        ("gaps", "of expected samples"),
        ("drop_labels", "hostname"),
    ],
)
def test_corrupted_data_is_quarantined_with_the_reason_and_never_published(
    connected: PrometheusWithHistory, storage: store.ObjectStoragePath, kind: str, reason: str
) -> None:
    start = fault_hour(kind)
    states = run_hour(start)
    assert states["pull_metrics"] == "success"
    assert states["validate_partition"] == "failed"
    assert states["publish_partition"] == "upstream_failed"
    assert states["__run__"] == "failed"
    assert states["__events__"] == []

    paths = store.PartitionPaths(storage, start)
    assert store.read_manifest(paths.published) is None
    report = (paths.quarantine / "report.txt").read_text()
    assert reason.lower() in report.lower(), report
    assert json.loads((paths.quarantine / "validation.json").read_text())["success"] is False
    assert (paths.quarantine / "data_docs" / "index.html").exists()
    kept, _ = store.read_frame(paths.quarantine / GPU_FILE)  # the bad data is kept for inspection
    assert (kept["hostname"] == FAULTY_NODE).any() or kind == "drop_labels"


def test_prometheus_down_fails_the_pull_clearly_and_writes_nothing(
    airflow_db: None, storage: store.ObjectStoragePath, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_PROMETHEUS_DEFAULT",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": processes.free_port()}),
    )
    monkeypatch.setenv("SLICEWISE_QUERY_RETRIES", "1")
    monkeypatch.setenv("SLICEWISE_QUERY_BACKOFF_S", "0.1")
    states = run_hour(hour(0), retries=0)
    assert states["pull_metrics"] == "failed"
    assert states["validate_partition"] == "upstream_failed"
    assert states["__run__"] == "failed"
    assert not (storage / "metrics").exists() and not (storage / "_staging").exists()


def test_pending_pods_shares_gpu_selectors_and_eviction_opt_ins_come_through_a_real_prometheus(
    tmp_path: Path,
) -> None:
    # A fleet whose embedders declare a quarter of a GPU and pin MPS with 4 replicas and whose LLM servers pin
    # A100-80GBs, backfilled for one hour into a Prometheus of its own (the shared one's fleet pins nothing).
    import copy

    from slicewise.metrics.prometheus import PrometheusEndpoint, PrometheusReader
    from slicewise.settings import load_settings
    from slicewise.simulator.backfill import backfill
    from slicewise.simulator.fleet import load_config
    from slicewise.stack import prometheus as prometheus_stack

    config = copy.deepcopy(load_config())
    config["workloads"]["search-embed"] |= {"gpu_share": 0.25, "gpu_sharing": "mps", "gpu_replicas": "4"}
    config["workloads"]["llm-serve"]["gpu_product"] = "NVIDIA-A100-SXM4-80GB"
    fleet = Fleet.from_config(config)
    start = hour(0)
    labels = prometheus_stack.FLEET_TARGET_LABELS
    span = (int(start.timestamp()), int((start + timedelta(hours=1)).timestamp()))
    backfill(fleet, *span, 60, tmp_path / "data", target_labels=labels)
    service = prometheus_stack.start(tmp_path)
    try:
        reader = PrometheusReader(PrometheusEndpoint(service.url), load_settings(environ={}))
        got = reader.demand(start, start + timedelta(hours=1))
    finally:
        processes.stop(service, tmp_path / "run")
    expected = simulated_demand(fleet, timestamps_of(start))
    assert set(expected["gpu_sharing"]) == {"", "mps"} and set(expected["gpu_product"]) != {""}
    assert set(expected["eviction_opt_in"]) == {True, False}  # serving pods opt in to evictions, jobs do not
    key = [schema.TIMESTAMP, *schema.DEMAND_LABELS]
    pd.testing.assert_frame_equal(
        got.sort_values(key, ignore_index=True), expected.sort_values(key, ignore_index=True)
    )
