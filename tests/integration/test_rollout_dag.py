"""``gpu_partition_rollout`` in recommend mode, end to end with ``dag.test()``: real MLflow, validated
partitions of simulated data, and both cluster backends (the simulated fleet; the real ``kubernetes`` client
against the stand-in API server). Recommend mode must write nothing to the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slicewise.catalog import load_catalog
from slicewise.simulator.fleet import Fleet
from tests.support.fake_apiserver import FakeApiServer
from tests.support.k8s_objects import gpu_pod, kubernetes_connection_json, write_kubeconfig
from tests.support.rollout_dag import read_plan, run_dag
from tests.support.stand_in_fleet import fleet_api_server

pytestmark = pytest.mark.integration


def test_without_a_trusted_forecaster_nothing_is_recommended_and_the_cluster_is_untouched(
    history: Path, airflow_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = history / "cluster" / "state.json"
    monkeypatch.setenv("SLICEWISE_CLUSTER_BACKEND", "simulated")
    monkeypatch.setenv("SLICEWISE_SIMULATED_CLUSTER_STATE", str(state))
    from slicewise.simulator.cluster import SimulatedCluster

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
    from slicewise.simulator.cluster import SimulatedCluster

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
    """The default simulated fleet's nodes as a GPU Operator cluster, one serving pod on each, and a
    non-evictable 4-GPU training job on sim-h100-0."""
    api = fleet_api_server()
    for node in Fleet.default().nodes:
        resource = sorted(
            k for k in api.node(node.name)["status"]["allocatable"] if k.startswith("nvidia.com/")
        )[0]
        api.add_pod(gpu_pod("team-a", f"{node.name}-svc", node=node.name, gpus={resource: 1}))
    api.add_pod(
        gpu_pod(
            "research",
            "train-0",
            node="sim-h100-0",
            gpus={"nvidia.com/gpu": 4},
            owner=("Job", "train"),
            evictable=False,
        )
    )
    return api


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
