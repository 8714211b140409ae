"""The ``simulated`` cluster backend: nodes and labels as the GPU Operator shows them, the simulator's pods,
evictions, cordons, and a state file that several processes share."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slicewise.catalog import ksm_resource, load_catalog
from slicewise.cluster import factory
from slicewise.cluster.base import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MANAGED_LABEL,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    PRIORITY_EXPANDER_CONFIG_MAP,
    ClusterError,
    ConfigMapChanged,
    ConfigMapNotFound,
    EvictionBlocked,
    LabelsChanged,
    NodeNotFound,
    Taint,
)
from slicewise.settings import load_settings
from slicewise.simulator import cli
from slicewise.simulator.cluster import SimulatedCluster
from slicewise.simulator.exporter import FleetCollector
from slicewise.simulator.fleet import Fleet, load_config
from slicewise.simulator.mig_manager import OPERAND_LABELS
from tests.support.clock import WORKDAY_INSTANT, FakeClock

REQUESTS = "kube_pod_container_resource_requests"


@pytest.fixture
def cluster(open_cluster: Callable[[float], SimulatedCluster]) -> SimulatedCluster:
    return open_cluster(20)


# -- initial state ------------------------------------------------------------------------------------------------
def test_given_a_new_state_file_then_every_fleet_node_carries_the_operator_labels(
    cluster: SimulatedCluster, fleet: Fleet
) -> None:
    catalog = load_catalog()
    nodes = cluster.list_nodes()
    assert [n.name for n in nodes] == sorted(node.name for node in fleet.nodes)
    for spec in fleet.nodes:
        node = cluster.get_node(spec.name)
        product = catalog.model(spec.model).gpu_product + ("-SHARED" if spec.mps_replicas > 1 else "")
        assert node.labels[MANAGED_LABEL] == "true"
        assert (node.gpu_product, node.gpu_count) == (product, spec.gpus)
        assert catalog.model_for_product(node.gpu_product) == catalog.model(spec.model)
        assert node.labels["nvidia.com/mig.capable"] == "true"
        assert node.labels["nvidia.com/mig.strategy"] == "mixed"
        assert (node.mig_config, node.mig_config_state) == (spec.mig_config, "success")
        assert node.device_plugin_config == spec.device_plugin_config
        assert all(node.labels[label] == "true" for label in OPERAND_LABELS)
        assert not node.unschedulable and node.resource_version


@pytest.mark.parametrize(
    ("node", "allocatable"),
    [
        ("sim-a100-40-0", {"nvidia.com/mig-1g.5gb": 28}),  # 4 GPUs x 7 x 1g.5gb
        (
            "sim-a100-80-0",  # all-balanced on 4 GPUs
            {"nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-2g.20gb": 4, "nvidia.com/mig-3g.40gb": 4},
        ),
        ("sim-h100-1", {"nvidia.com/gpu": 16}),  # MPS: 4 GPUs x 4 replicas
        ("sim-h100-0", {"nvidia.com/gpu": 4}),  # whole GPUs
    ],
)
def test_given_the_fleet_config_then_allocatable_is_what_the_device_plugin_advertises(
    cluster: SimulatedCluster, node: str, allocatable: dict[str, int]
) -> None:
    assert dict(cluster.get_node(node).allocatable) == allocatable


def test_given_an_unknown_or_unmanaged_node_then_node_not_found(cluster: SimulatedCluster) -> None:
    with pytest.raises(NodeNotFound):
        cluster.get_node("nope")
    cluster.set_labels("sim-h100-0", {MANAGED_LABEL: None}, expected={})
    assert "sim-h100-0" not in [n.name for n in cluster.list_nodes()]
    with pytest.raises(NodeNotFound):
        cluster.get_node("sim-h100-0")


# -- pods ------------------------------------------------------------------------------------------------------
def _exporter_pods(fleet: Fleet, at: float) -> set[tuple[str, str, str, str]]:
    """(namespace, pod, node, ksm resource) of every scheduled pod in the exporter's kube-state-metrics series."""
    collector = FleetCollector(fleet, clock=lambda: at)
    family = next(m for m in collector.collect() if m.name == REQUESTS)
    return {
        (s.labels["namespace"], s.labels["pod"], s.labels["node"], s.labels["resource"])
        for s in family.samples
        if s.labels["node"]
    }


def test_given_a_time_then_the_pods_are_the_exporters_running_pods(
    cluster: SimulatedCluster, fleet: Fleet, clock: FakeClock
) -> None:
    for at in (WORKDAY_INSTANT, WORKDAY_INSTANT + 5 * 3600 + 17):
        clock.now = at
        listed = set()
        for node in fleet.nodes:
            for pod in cluster.list_gpu_pods(node.name):
                assert pod.phase == "Running" and pod.node == node.name
                ((resource, count),) = pod.requests.items()
                assert count == 1
                listed.add((pod.namespace, pod.name, pod.node, ksm_resource(resource)))
        exported = _exporter_pods(fleet, at)
        assert listed and listed == exported


def test_given_running_pods_then_their_start_is_where_the_load_model_turns_the_slot_over(
    fleet: Fleet,
) -> None:
    # The cordon rule needs each pod's start; it must be the epoch boundary of load.slot_load.
    from slicewise.simulator.cluster import _running_pods

    pods = _running_pods(fleet, WORKDAY_INSTANT)
    assert pods
    for pod in pods[:: max(1, len(pods) // 20)]:
        assert pod.started <= WORKDAY_INSTANT
        assert pod.name in {p.name for p in _running_pods(fleet, pod.started)}
        assert pod.slot not in {p.slot for p in _running_pods(fleet, pod.started - 1)}


def test_given_workload_config_then_pods_carry_owner_and_evictability(cluster: SimulatedCluster) -> None:
    training = cluster.list_gpu_pods("sim-h100-0")  # llm-train and research-train: Jobs
    assert training
    assert all(p.owner_kind == "Job" and not p.evictable and p.blockers for p in training)
    assert all("slicewise.io/evictable" in p.blockers[0] for p in training)
    serving = [p for p in cluster.list_gpu_pods("sim-a100-80-0") if p.name.startswith("llm-serve-")]
    assert serving
    # A Deployment's pods belong to its ReplicaSet, as the API reports the controller owner.
    assert all(p.owner_kind == "ReplicaSet" and p.owner_name.startswith("llm-serve-") for p in serving)
    assert all(p.evictable and p.blockers == () for p in serving)
    notebooks = [p for p in cluster.list_gpu_pods("sim-h100-1") if p.name.startswith("notebook-")]
    assert notebooks and all(p.owner_kind == "StatefulSet" and p.evictable for p in notebooks)
    assert all(p.requests == {"nvidia.com/gpu": 1} for p in notebooks)


def test_given_listed_pods_then_each_carries_when_it_started(cluster: SimulatedCluster, fleet: Fleet) -> None:
    # status.startTime as the API reports it: the start of the pod's epoch in the load model, not after now.
    from slicewise.simulator.cluster import _running_pods

    now = cluster.clock()
    listed = cluster.list_gpu_pods("sim-a100-80-0")
    assert listed
    starts = {p.name: p.started for p in _running_pods(fleet, now)}  # the layouts have not changed
    for pod in listed:
        assert pod.started_at is not None and pod.started_at <= datetime.fromtimestamp(now, tz=UTC)
        assert pod.started_at.timestamp() == starts[pod.name]


def test_given_an_evicted_pod_then_it_is_no_longer_listed(cluster: SimulatedCluster) -> None:
    before = cluster.list_gpu_pods("sim-a100-40-0")
    victim = before[0]
    cluster.evict(victim.namespace, victim.name)
    after = cluster.list_gpu_pods("sim-a100-40-0")
    assert [p.name for p in after] == [p.name for p in before[1:]]
    cluster.evict(victim.namespace, victim.name)  # already gone: no error, like a 404
    cluster.evict("team-vision", "no-such-pod")


def test_given_a_pdb_that_allows_no_disruption_then_eviction_is_blocked(
    tmp_path: Path, clock: FakeClock
) -> None:
    config = copy.deepcopy(load_config())
    config["workloads"]["vision-infer"]["pdb_blocks"] = True
    cluster = SimulatedCluster.open(tmp_path / "state.json", fleet=Fleet.from_config(config), clock=clock)
    pod = next(p for p in cluster.list_gpu_pods("sim-a100-40-0") if p.name.startswith("vision-infer-"))
    assert not pod.evictable and any("PodDisruptionBudget" in b for b in pod.blockers)
    with pytest.raises(EvictionBlocked):
        cluster.evict(pod.namespace, pod.name)
    assert pod.name in [p.name for p in cluster.list_gpu_pods("sim-a100-40-0")]


def test_given_a_cordoned_node_then_no_new_pod_lands_there_until_uncordoned(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    assert cluster.list_gpu_pods("sim-a100-80-0")
    cluster.cordon("sim-a100-80-0")
    clock.now += 2 * 86_400  # longer than any pod lives: every pod that was there has ended
    assert cluster.list_gpu_pods("sim-a100-80-0") == []
    assert cluster.list_gpu_pods("sim-a100-40-0")  # other nodes go on
    cluster.uncordon("sim-a100-80-0")
    assert cluster.list_gpu_pods("sim-a100-80-0")


# -- labels, annotations, cordon ----------------------------------------------------------------------------------
def test_given_a_stale_expectation_then_labels_changed_and_nothing_written(
    cluster: SimulatedCluster, tmp_path: Path
) -> None:
    before = (tmp_path / "state.json").read_bytes()
    node = cluster.get_node("sim-h100-0")
    with pytest.raises(LabelsChanged, match=MIG_CONFIG_LABEL):
        cluster.set_labels(
            "sim-h100-0", {MIG_CONFIG_LABEL: "all-7g.80gb"}, expected={MIG_CONFIG_LABEL: "all-balanced"}
        )
    with pytest.raises(LabelsChanged):
        cluster.set_labels("sim-h100-0", {"example.com/x": "1"}, expected={"example.com/x": "0"})  # absent
    assert (tmp_path / "state.json").read_bytes() == before
    assert cluster.get_node("sim-h100-0") == node


def test_given_matching_expectations_then_labels_are_written_and_the_version_moves(
    cluster: SimulatedCluster,
) -> None:
    before = cluster.get_node("sim-h100-0")
    written = cluster.set_labels(
        "sim-h100-0",
        {"example.com/team": "llm", "example.com/absent": None},
        expected={"example.com/team": None},
    )
    assert written.labels["example.com/team"] == "llm"
    assert int(written.resource_version) > int(before.resource_version)
    removed = cluster.set_labels(
        "sim-h100-0", {"example.com/team": None}, expected={"example.com/team": "llm"}
    )
    assert "example.com/team" not in removed.labels
    with pytest.raises(ClusterError):  # the API server refuses label values it cannot store (422)
        cluster.set_labels("sim-h100-0", {"example.com/when": "2024-01-08T14:00:00Z"}, expected={})


def test_given_annotations_and_cordons_then_the_node_shows_them(cluster: SimulatedCluster) -> None:
    node = cluster.set_annotations("sim-h200-0", {"slicewise.io/last-change": "2024-01-08T14:00:00Z"})
    assert node.annotations == {"slicewise.io/last-change": "2024-01-08T14:00:00Z"}
    assert cluster.set_annotations("sim-h200-0", {"slicewise.io/last-change": None}).annotations == {}
    cordoned = cluster.cordon("sim-h200-0")
    assert cordoned.unschedulable and cluster.cordon("sim-h200-0") == cordoned  # idempotent
    assert not cluster.uncordon("sim-h200-0").unschedulable


def test_a_configmap_write_from_a_stale_read_is_refused_and_a_state_from_before_gets_the_shipped_ones(
    tmp_path: Path, fleet: Fleet, clock: FakeClock
) -> None:
    cluster = SimulatedCluster.open(tmp_path / "state.json", fleet=fleet, clock=clock)
    read = cluster.get_config_map("kube-system", PRIORITY_EXPANDER_CONFIG_MAP)
    assert read.data["priorities"].startswith("20:\n  - .*-gpu-mps-.*")  # include/k8s/, as applied
    written = cluster.update_config_map(read, {"priorities": "10:\n  - .*\n"}, {"example.com/by": "test"})
    assert int(written.resource_version) > int(read.resource_version)
    assert (
        cluster.update_config_map(written, {"priorities": "10:\n  - .*\n"}, {}) == written
    )  # no-op: no bump

    with pytest.raises(ConfigMapChanged):
        cluster.update_config_map(read, {"priorities": "5:\n  - .*\n"}, {})
    assert cluster.get_config_map("kube-system", PRIORITY_EXPANDER_CONFIG_MAP) == written
    with pytest.raises(ConfigMapNotFound, match="has kube-system/cluster-autoscaler-priority-expander"):
        cluster.get_config_map("autoscaler", PRIORITY_EXPANDER_CONFIG_MAP)

    state = json.loads((tmp_path / "state.json").read_text())
    del state["config_maps"]  # written by a version that kept none
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert cluster.get_config_map("kube-system", PRIORITY_EXPANDER_CONFIG_MAP).data == read.data


# -- the shared state file ----------------------------------------------------------------------------------------
def test_given_two_backends_on_one_file_then_each_sees_the_others_writes(
    tmp_path: Path, fleet: Fleet, clock: FakeClock
) -> None:
    first = SimulatedCluster.open(tmp_path / "state.json", fleet=fleet, clock=clock)
    second = SimulatedCluster.open(tmp_path / "state.json", fleet=fleet, clock=clock)
    first.set_annotations("sim-h100-0", {"example.com/by": "first"})
    assert second.get_node("sim-h100-0").annotations["example.com/by"] == "first"
    second.cordon("sim-h100-0")
    assert first.get_node("sim-h100-0").unschedulable


def test_given_concurrent_threads_then_no_write_is_lost(tmp_path: Path, fleet: Fleet) -> None:
    path = tmp_path / "state.json"
    SimulatedCluster.open(path, fleet=fleet)

    def write(worker: int) -> None:
        cluster = SimulatedCluster.open(path, fleet=fleet)
        for i in range(25):
            cluster.set_annotations("sim-h100-0", {f"test.slicewise.io/t{worker}-{i}": "x"})

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(SimulatedCluster.open(path, fleet=fleet).get_node("sim-h100-0").annotations) == 100


def test_given_concurrent_processes_then_no_write_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from slicewise.simulator.cluster import SimulatedCluster

        cluster = SimulatedCluster.open(Path(sys.argv[1]))
        for i in range(50):
            cluster.set_annotations("sim-h100-0", {f"test.slicewise.io/{sys.argv[2]}-{i}": "x"})
        """
    )
    workers = [subprocess.Popen([sys.executable, "-c", script, str(path), f"p{w}"]) for w in range(2)]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    annotations = SimulatedCluster.open(path).get_node("sim-h100-0").annotations
    assert len(annotations) == 100


def test_given_a_state_of_another_fleet_then_open_refuses_until_reset(tmp_path: Path, fleet: Fleet) -> None:
    path = tmp_path / "state.json"
    SimulatedCluster.open(path, fleet=Fleet.synthetic(16, seed=1))
    with pytest.raises(ClusterError, match="reset"):
        SimulatedCluster.open(path, fleet=fleet)
    cluster = SimulatedCluster.open(path, fleet=fleet, reset=True)
    assert [n.name for n in cluster.list_nodes()] == sorted(node.name for node in fleet.nodes)


# -- factory and CLI ----------------------------------------------------------------------------------------------
def test_given_settings_then_the_factory_opens_the_named_backend(tmp_path: Path) -> None:
    settings = load_settings(
        {"cluster_backend": "simulated", "simulated_cluster_state": str(tmp_path / "s.json")}
    )
    backend = factory.open_backend(settings)
    assert backend.name == "simulated" and (tmp_path / "s.json").is_file()
    default = load_settings({"cluster_backend": "simulated"})
    assert factory.simulated_state_path(default).parts[-2:] == ("cluster", "state.json")
    with pytest.raises(ValueError, match="simulated, kubernetes"):
        factory.open_backend(load_settings({"cluster_backend": "k8s"}))


def test_given_the_cli_then_show_fault_and_reset_work_on_the_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="slicewise")
    cli.register(parser.add_subparsers(dest="command", required=True))
    state = ["--state", str(tmp_path / "state.json")]

    def run(*argv: str) -> int:
        args = parser.parse_args(["simulate", "cluster", *argv, *state])
        return int(args.func(args))

    assert run("fault", "sim-h100-0", "stuck") == 0
    cluster = SimulatedCluster.open(tmp_path / "state.json")
    cluster.set_labels("sim-h100-0", {MIG_CONFIG_LABEL: "all-7g.80gb"}, expected={})
    cluster.set_labels("sim-h100-1", {DEVICE_PLUGIN_CONFIG_LABEL: "mps-3"}, expected={})
    capsys.readouterr()
    assert run("show") == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("sim-h100-0 "))
    assert "all-7g.80gb" in line and "pending" in line
    assert "(stuck)" in out and "switching to mps-3" in out
    assert run("fault", "nope", "fail") == 2
    assert "nope" in capsys.readouterr().err
    assert run("reset") == 0
    assert cluster.get_node("sim-h100-0").mig_config_state == "success"
    assert cluster.get_node("sim-h100-0").labels[MIG_STATE_LABEL] == "success"
    assert cluster.get_node("sim-h100-0").mig_config == "all-disabled"


def test_a_simulated_pod_carries_its_workloads_product_pin_as_its_node_selector() -> None:
    from slicewise.cluster.base import GPU_PRODUCT_LABEL
    from slicewise.simulator.cluster_pods import SimulatedPod, gpu_pod

    pod = SimulatedPod("team-a", "serve-0", "sim-h100-0", "serve", "nvidia.com/gpu", 0.0, "slot/0")
    pinned = gpu_pod(
        pod, {"evictable": True, "owner_kind": "Deployment", "gpu_product": "NVIDIA-H100-80GB-HBM3"}
    )
    assert pinned.node_selector == {GPU_PRODUCT_LABEL: ("NVIDIA-H100-80GB-HBM3",)}
    assert pinned.may_run_on({GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"})
    assert not pinned.may_run_on({GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3-SHARED"})  # GFD's MPS suffix
    assert gpu_pod(pod, {"evictable": True, "owner_kind": "Deployment"}).node_selector == {}


def test_a_taint_is_recorded_beside_others_and_kept_in_the_state_file(
    cluster: SimulatedCluster, open_cluster: Callable[[float], SimulatedCluster]
) -> None:
    name = cluster.list_nodes()[0].name
    standby = Taint("slicewise.io/standby", "PreferNoSchedule")
    dedicated = Taint("dedicated", "NoSchedule", "llm")
    version = cluster.get_node(name).resource_version
    cluster.set_taint(name, dedicated, True)
    node = cluster.set_taint(name, standby, True)
    assert node.taints == (dedicated, standby) and node.resource_version != version
    assert open_cluster(20).get_node(name).taints == (dedicated, standby)  # from the state file
    assert cluster.set_taint(name, standby, False).taints == (dedicated,)
    assert cluster.set_taint(name, standby, False).taints == (dedicated,)  # already gone: no error
    with pytest.raises(NodeNotFound):
        cluster.set_taint("no-such-node", standby, True)


def test_a_taint_reads_as_kubectl_writes_it() -> None:
    assert str(Taint("slicewise.io/standby", "PreferNoSchedule")) == "slicewise.io/standby:PreferNoSchedule"
    assert str(Taint("dedicated", "NoSchedule", "llm")) == "dedicated=llm:NoSchedule"
