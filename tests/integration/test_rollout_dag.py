"""``gpu_partition_rollout`` in recommend mode, end to end with ``dag.test()``: real MLflow, validated
partitions of simulated data, and both cluster backends (the simulated fleet; the real ``kubernetes`` client
against the stand-in API server). Recommend mode must write nothing to the cluster."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from slicewise import store
from slicewise.catalog import layout_capacity, load_catalog
from slicewise.simulator.fleet import Fleet
from slicewise.stack import mlflow as mlflow_stack
from slicewise.stack import processes
from tests.support.fake_apiserver import FakeApiServer
from tests.support.k8s_objects import gpu_node, gpu_pod, kubernetes_connection_json, write_kubeconfig
from tests.support.partitions import publish_hour

pytestmark = pytest.mark.integration
DAG_ID = "gpu_partition_rollout"
#: Three weekday hours around the fleet's daily peak: pending demand appears when slots run out.
FIRST = datetime(2026, 11, 24, 11, tzinfo=UTC)
HOURS = 3
RUN_AFTER = FIRST + timedelta(hours=HOURS, minutes=5)
#: dag.test names runs after run_after: each test's run gets its own second.
_RUN_SECONDS = itertools.count()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("mlflow-rollout")
    service = mlflow_stack.start(home)
    try:
        yield service.url
    finally:
        processes.stop(service, home / "run")


@pytest.fixture()
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_server: str) -> Path:
    """Validated hours in a fresh storage root; the run's settings point at it and at MLflow."""
    root = store.storage_path(tmp_path.as_uri())
    fleet = Fleet.default()
    for hour in range(HOURS):
        publish_hour(root, fleet, FIRST + timedelta(hours=hour))
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setenv("SLICEWISE_MLFLOW_TRACKING_URI", mlflow_server)
    return tmp_path


def run_dag(**conf: Any) -> dict[str, str]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags" / f"{DAG_ID}.py"))
    dag = bag.get_dag(DAG_ID)
    assert dag is not None, bag.import_errors
    for task in dag.tasks:
        task.retries = 0
    run = dag.test(run_after=RUN_AFTER + timedelta(seconds=next(_RUN_SECONDS)), run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()} | {"__run__": run.state}


def read_plan(root: Path) -> dict[str, Any]:
    (plan_file,) = root.glob("plans/*/plan.json")
    for name in ("plan.md", "plan.html", "plan.parquet", "forecasts.json", "observed.json"):
        assert (plan_file.parent / name).exists(), name
    return dict(json.loads(plan_file.read_text()))


def test_without_a_trusted_forecaster_nothing_is_recommended_and_the_cluster_is_untouched(
    history: Path, airflow_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = history / "cluster" / "state.json"
    monkeypatch.setenv("SLICEWISE_CLUSTER_BACKEND", "simulated")
    monkeypatch.setenv("SLICEWISE_SIMULATED_CLUSTER_STATE", str(state))
    from slicewise.cluster.simulated import SimulatedCluster

    SimulatedCluster.open(state).list_nodes()  # create the state as the demo would
    before = state.read_bytes()

    states = run_dag()
    assert states["__run__"] == "success", states
    plan = read_plan(history)
    assert not plan["trusted"] and plan["predictor"] == "p90_last_hour"
    assert "no champion" in plan["notes"][0]
    nodes = {n["node"]: n for n in plan["nodes"]}
    assert set(nodes) == {node.name for node in Fleet.default().nodes}
    assert {n["action"] for n in nodes.values()} <= {"keep", "skip"}
    assert state.read_bytes() == before


def test_with_the_baseline_fallback_the_plan_recommends_valid_changes_and_writes_nothing(
    history: Path, airflow_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = history / "cluster" / "state.json"
    monkeypatch.setenv("SLICEWISE_CLUSTER_BACKEND", "simulated")
    monkeypatch.setenv("SLICEWISE_SIMULATED_CLUSTER_STATE", str(state))
    from slicewise.cluster.simulated import SimulatedCluster

    SimulatedCluster.open(state).list_nodes()
    before = state.read_bytes()

    states = run_dag(planner_fallback="baseline", planner_policy="thresholds", planner_max_change_share=1.0)
    assert states["__run__"] == "success", states
    plan = read_plan(history)
    catalog = load_catalog()
    proposed = [n for n in plan["nodes"] if n["action"] in ("change", "blocked", "cordon-to-drain")]
    assert proposed, plan
    for verdict in proposed:
        model = catalog.model(verdict["gpu_model"])
        catalog.layout_of(verdict["desired"]["mig_config"], model.name)  # a config the MIG manager knows
        catalog.mps_replicas(verdict["desired"]["device_plugin_config"])
        assert verdict["desired"] != verdict["current"]
        assert verdict["rule"].startswith("thresholds")
    blocked = [n for n in plan["nodes"] if n["action"] == "blocked"]
    for verdict in blocked:  # training jobs are not evictable in the simulated fleet
        assert "non-evictable" in verdict["reasons"][-1]
    assert state.read_bytes() == before  # recommend mode: nothing written to the cluster


def _stand_in_cluster() -> FakeApiServer:
    """The default simulated fleet's nodes as a GPU Operator cluster, with a few GPU pods."""
    catalog = load_catalog()
    nodes, pods = [], []
    for node in Fleet.default().nodes:
        model = catalog.model(node.model)
        plugin = node.device_plugin_config
        capacity = layout_capacity(
            model, catalog.layout_of(node.mig_config, model.name), node.gpus, catalog.mps_replicas(plugin)
        )
        nodes.append(
            gpu_node(
                node.name,
                product=model.gpu_product,
                gpu_count=node.gpus,
                mig_config=node.mig_config,
                allocatable=capacity,
                device_plugin_config=plugin,
            )
        )
        resource = sorted(capacity)[0]
        pods.append(gpu_pod("team-a", f"{node.name}-svc", node=node.name, gpus={resource: 1}))
    pods.append(
        gpu_pod(
            "research",
            "train-0",
            node="sim-h100-0",
            gpus={"nvidia.com/gpu": 4},
            owner=("Job", "train"),
            evictable=False,
        )
    )
    return FakeApiServer(nodes=nodes, pods=pods, token="stand-in-token")


def test_the_kubernetes_backend_plans_from_the_api_server_and_writes_nothing(
    history: Path, airflow_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _stand_in_cluster() as api:
        kubeconfig = write_kubeconfig(history / "kubeconfig", api.url)
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", kubernetes_connection_json(kubeconfig))
        monkeypatch.setenv("SLICEWISE_CLUSTER_BACKEND", "kubernetes")
        states = run_dag(
            planner_fallback="baseline", planner_policy="thresholds", planner_max_change_share=1.0
        )
        assert states["__run__"] == "success", states
        assert api.requests, "the backend never reached the stand-in"
        assert api.writes() == []
    plan = read_plan(history)
    nodes = {n["node"]: n for n in plan["nodes"]}
    assert set(nodes) == {node.name for node in Fleet.default().nodes}
    observed = json.loads(next(history.glob("plans/*/observed.json")).read_text())
    assert {o["node"]["name"] for o in observed} == set(nodes)
    # The non-evictable 4-GPU training job pins sim-h100-0: no MPS for it, whatever its load.
    h100 = nodes["sim-h100-0"]
    assert h100["action"] != "change"
    assert any("more than one GPU" in r or "research/train-0" in r for r in h100["reasons"]), h100
    changes = [n for n in nodes.values() if n["action"] == "change"]
    assert changes, plan
    for verdict in changes:  # what a change would evict is named, pod by pod
        assert verdict["disruption"] == [f"team-a/{verdict['node']}-svc (ReplicaSet)"]
