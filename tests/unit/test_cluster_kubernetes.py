"""The ``kubernetes`` backend against the local API-server stand-in, over real HTTP with the real client."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from slicewise.cluster.base import (
    HOLD_ANNOTATION,
    ClusterError,
    CordonedByOthers,
    EvictionBlocked,
    Hold,
    LabelsChanged,
    NodeNotFound,
    Taint,
)
from slicewise.cluster.k8s_mapping import node_selector, pod_gpu_requests, selector_matches
from slicewise.cluster.kubernetes import MERGE_PATCH, KubernetesCluster
from tests.support.fake_apiserver import FakeApiServer, fleet_nodes, gpu_node, gpu_pod, pdb, write_kubeconfig
from tests.support.k8s_objects import kubernetes_connection_json

MIG = "nvidia.com/mig.config"
DP = "nvidia.com/device-plugin.config"
H100: dict[str, Any] = {
    "product": "NVIDIA-H100-80GB-HBM3",
    "gpu_count": 8,
    "mig_config": "all-balanced",
    "allocatable": {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8},
    "device_plugin_config": "h100-mig",
}


def _nodes() -> list[dict[str, Any]]:
    return [
        *fleet_nodes("h100", 2, **H100),
        gpu_node(
            "a100-0",
            product="NVIDIA-A100-SXM4-80GB",
            gpu_count=8,
            mig_config="all-disabled",
            allocatable={"nvidia.com/gpu": 8},
            unschedulable=True,
            annotations={"slicewise.io/last-change": "2026-01-01T00:00:00Z"},
        ),
        gpu_node("other-0", managed=False, **H100),
    ]


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(nodes=_nodes()) as server:
        yield server


def _backend(url: str, **kwargs: Any) -> KubernetesCluster:
    configuration = client.Configuration()
    configuration.host = url
    return KubernetesCluster(client.ApiClient(configuration), **{"backoff_s": 0.0, **kwargs})


@pytest.fixture
def cluster(api: FakeApiServer) -> KubernetesCluster:
    return _backend(api.url)


def _patches(api: FakeApiServer) -> list[Any]:
    return [r for r in api.requests if r.method == "PATCH"]


# -- reading nodes ---------------------------------------------------------------------------------------------


def test_list_nodes_maps_gpu_operator_labels_of_managed_nodes_only(cluster: KubernetesCluster) -> None:
    nodes = cluster.list_nodes()

    assert [n.name for n in nodes] == ["a100-0", "h100-0", "h100-1"]
    h100 = nodes[1]
    assert h100.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert h100.gpu_count == 8
    assert h100.mig_config == "all-balanced"
    assert h100.mig_config_state == "success"
    assert h100.device_plugin_config == "h100-mig"
    # Only GPU resources; cpu, memory, pods and ephemeral-storage are dropped.
    assert h100.allocatable == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    assert h100.unschedulable is False
    assert h100.labels["nvidia.com/mig.strategy"] == "mixed"
    assert h100.resource_version
    a100 = nodes[0]
    assert a100.unschedulable is True
    assert a100.allocatable == {"nvidia.com/gpu": 8}
    assert a100.device_plugin_config == ""
    assert a100.annotations == {"slicewise.io/last-change": "2026-01-01T00:00:00Z"}


def test_list_nodes_asks_the_server_for_managed_nodes(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    cluster.list_nodes()

    assert [(r.method, r.path, r.query) for r in api.requests] == [
        ("GET", "/api/v1/nodes", {"labelSelector": ["slicewise.io/managed=true"]})
    ]


@pytest.mark.parametrize("count", ["", "eight", "-1"])
def test_an_unreadable_gpu_count_label_reads_as_zero(count: str) -> None:
    node = gpu_node("h100-0", **H100)
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = count
    with FakeApiServer(nodes=[node]) as api:
        assert _backend(api.url).get_node("h100-0").gpu_count == 0


def test_get_node_reads_one_node_fresh(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    api.set_node_labels_externally("h100-0", {MIG: "all-1g.10gb"})

    node = cluster.get_node("h100-0")

    assert node.mig_config == "all-1g.10gb"
    assert node.resource_version == api.node("h100-0")["metadata"]["resourceVersion"]


@pytest.mark.parametrize(("name", "why"), [("nope", "does not exist"), ("other-0", "not managed")])
def test_get_node_refuses_missing_and_unmanaged_nodes(
    cluster: KubernetesCluster, name: str, why: str
) -> None:
    with pytest.raises(NodeNotFound, match=why):
        cluster.get_node(name)


# -- reading pods ----------------------------------------------------------------------------------------------


def test_list_gpu_pods_keeps_unfinished_gpu_pods_on_the_node_sorted() -> None:
    one_g = {"nvidia.com/mig-1g.10gb": 1}
    pods = [
        gpu_pod("team-b", "train-0", node="h100-0", gpus={"nvidia.com/mig-3g.40gb": 2}),
        gpu_pod("team-a", "serve-1", node="h100-0", gpus=one_g),
        gpu_pod("team-a", "serve-0", node="h100-0", gpus=one_g, phase="Pending"),
        gpu_pod("team-a", "cpu-only", node="h100-0", gpus={}),
        gpu_pod("team-a", "done", node="h100-0", gpus=one_g, phase="Succeeded"),
        gpu_pod("team-a", "crashed", node="h100-0", gpus=one_g, phase="Failed"),
        gpu_pod("team-a", "elsewhere", node="h100-1", gpus=one_g),
    ]
    with FakeApiServer(nodes=_nodes(), pods=pods) as api:
        found = _backend(api.url).list_gpu_pods("h100-0")

        assert [(p.namespace, p.name, p.phase) for p in found] == [
            ("team-a", "serve-0", "Pending"),
            ("team-a", "serve-1", "Running"),
            ("team-b", "train-0", "Running"),
        ]
        assert found[2].requests == {"nvidia.com/mig-3g.40gb": 2}
        assert found[2].node == "h100-0"
        assert (found[2].owner_kind, found[2].owner_name) == ("ReplicaSet", "workload-5d8f7c")
        assert api.requests[0].query == {
            "fieldSelector": ["spec.nodeName=h100-0,status.phase!=Succeeded,status.phase!=Failed"]
        }


def test_a_declared_gpu_share_is_read_from_the_pods_annotation() -> None:
    gpu = {"nvidia.com/gpu": 1}
    pods = [
        gpu_pod("ml", "half", node="h100-0", gpus=gpu, annotations={"slicewise.io/gpu-share": "0.5"}),
        gpu_pod("ml", "plain", node="h100-0", gpus=gpu),
        gpu_pod("ml", "typo", node="h100-0", gpus=gpu, annotations={"slicewise.io/gpu-share": "half"}),
        gpu_pod("ml", "too-big", node="h100-0", gpus=gpu, annotations={"slicewise.io/gpu-share": "2"}),
    ]
    with FakeApiServer(nodes=_nodes(), pods=pods) as api:
        found = {p.name: p.share for p in _backend(api.url).list_gpu_pods("h100-0")}
    # Only a share of one GPU, in (0, 1], opts in; anything else keeps the pod to what it requests.
    assert found == {"half": 0.5, "plain": None, "typo": None, "too-big": None}


def test_a_pods_start_time_is_read_from_its_status() -> None:
    gpu = {"nvidia.com/gpu": 1}
    pods = [
        gpu_pod("ml", "running", node="h100-0", gpus=gpu, started="2026-12-05T06:30:00Z"),
        gpu_pod("ml", "pending", node="h100-0", gpus=gpu, phase="Pending"),
    ]
    with FakeApiServer(nodes=_nodes(), pods=pods) as api:
        found = {p.name: p.started_at for p in _backend(api.url).list_gpu_pods("h100-0")}
    # An evicted pod comes back as a new pod with a new start: the planner reads it as when the pod last moved.
    assert found == {"running": datetime(2026, 12, 5, 6, 30, tzinfo=UTC), "pending": None}


def test_an_init_container_counts_when_it_asks_for_more_than_the_containers_together() -> None:
    pods = [
        gpu_pod("ml", "big-init", node="h100-0", gpus={"nvidia.com/gpu": 1}, init_gpus={"nvidia.com/gpu": 4}),
        gpu_pod("ml", "init-only", node="h100-0", gpus={}, init_gpus={"nvidia.com/mig-1g.10gb": 1}),
    ]
    with FakeApiServer(nodes=_nodes(), pods=pods) as api:
        found = {p.name: p.requests for p in _backend(api.url).list_gpu_pods("h100-0")}

    assert found == {"big-init": {"nvidia.com/gpu": 4}, "init-only": {"nvidia.com/mig-1g.10gb": 1}}


def _pod_spec(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> Any:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", namespace="ns"),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name=f"c{i}", **c) for i, c in enumerate(containers)],
            init_containers=[client.V1Container(name=f"i{i}", **c) for i, c in enumerate(init or [])],
        ),
    )


def _res(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {"resources": client.V1ResourceRequirements(requests=requests, limits=limits)}


def test_effective_gpu_request_follows_the_scheduler() -> None:
    gpu = "nvidia.com/gpu"
    # Limits stand in for absent requests (the API server would default them).
    assert pod_gpu_requests(_pod_spec([_res(limits={gpu: "2", "cpu": "1"})])) == {gpu: 2}
    # Containers add up; non-GPU resources are ignored.
    assert pod_gpu_requests(_pod_spec([_res({gpu: "1"}), _res({gpu: "2", "memory": "1Gi"})])) == {gpu: 3}
    # Classic init containers run one at a time: the biggest one counts if it beats the containers' sum.
    pod = _pod_spec([_res({gpu: "1"})], init=[_res({gpu: "3"}), _res({gpu: "2"})])
    assert pod_gpu_requests(pod) == {gpu: 3}
    # A sidecar init container keeps running, so it adds to the containers.
    sidecar = {"restart_policy": "Always", **_res({gpu: "1"})}
    assert pod_gpu_requests(_pod_spec([_res({gpu: "2"})], init=[sidecar])) == {gpu: 3}
    assert pod_gpu_requests(_pod_spec([_res({"cpu": "4"})])) == {}


def _placed(selector: dict[str, str] | None, terms: list[list[tuple[str, str, list[str]]]]) -> Any:
    affinity = client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                node_selector_terms=[
                    client.V1NodeSelectorTerm(
                        match_expressions=[
                            client.V1NodeSelectorRequirement(key=k, operator=op, values=v)
                            for k, op, v in term
                        ]
                    )
                    for term in terms
                ]
            )
        )
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", namespace="ns"),
        spec=client.V1PodSpec(containers=[], node_selector=selector, affinity=affinity if terms else None),
    )


def test_node_selector_reads_the_node_selector_and_a_sole_affinity_terms_in_expressions() -> None:
    product, zone = "nvidia.com/gpu.product", "topology.kubernetes.io/zone"
    assert node_selector(_placed(None, [])) == {}
    assert node_selector(_placed({product: "NVIDIA-A100-SXM4-80GB"}, [])) == {
        product: ("NVIDIA-A100-SXM4-80GB",)
    }
    # One term: its In expressions bind (intersected with the nodeSelector); other operators are not read.
    one = [[(product, "In", ["B", "A"]), (zone, "NotIn", ["z1"])]]
    assert node_selector(_placed(None, one)) == {product: ("A", "B")}
    assert node_selector(_placed({product: "A"}, one)) == {product: ("A",)}
    # Several terms are alternatives: none binds alone.
    assert node_selector(_placed(None, [[(product, "In", ["A"])], [(product, "In", ["B"])]])) == {}


def test_evictability_lists_every_blocker() -> None:
    one_g = {"nvidia.com/mig-1g.10gb": 1}
    pods = [
        gpu_pod("llm", "guarded", node="h100-0", gpus=one_g, labels={"app": "llm", "tier": "serve"}),
        gpu_pod("llm", "free", node="h100-0", gpus=one_g, labels={"app": "batch"}),
        gpu_pod("misc", "bare", node="h100-0", gpus=one_g, owner=None, evictable=False, labels={"app": "x"}),
        gpu_pod("ops", "agent", node="h100-0", gpus=one_g, owner=("DaemonSet", "dcgm-probe")),
        gpu_pod("ops", "multi", node="h100-0", gpus=one_g, labels={"team": "ops", "app": "y"}),
        gpu_pod("jobs", "trainer", node="h100-0", gpus=one_g, owner=("Job", "train-7"), labels={"app": "t"}),
    ]
    pdbs = [
        pdb("llm", "llm-pdb", disruptions_allowed=0, match_labels={"app": "llm"}),
        # Covers "free" only if its app is not batch: NotIn keeps it out.
        pdb(
            "llm",
            "not-batch",
            disruptions_allowed=0,
            match_expressions=[
                {"key": "app", "operator": "NotIn", "values": ["batch", "llm"]},
            ],
        ),
        pdb("ops", "ops-a", disruptions_allowed=1, match_expressions=[{"key": "team", "operator": "Exists"}]),
        pdb(
            "ops",
            "ops-b",
            disruptions_allowed=2,
            match_expressions=[
                {"key": "app", "operator": "In", "values": ["y", "z"]},
            ],
        ),
        pdb("jobs", "roomy", disruptions_allowed=1, match_labels={"app": "t"}),
    ]
    with FakeApiServer(nodes=_nodes(), pods=pods, pdbs=pdbs) as api:
        found = {p.name: p for p in _backend(api.url).list_gpu_pods("h100-0")}
        pdb_lists = [r.path for r in api.requests if "poddisruptionbudgets" in r.path]

    assert found["guarded"].blockers == ("PodDisruptionBudget llm/llm-pdb allows 0 disruptions",)
    assert found["free"].evictable and found["free"].blockers == ()
    assert found["bare"].blockers == ("no slicewise.io/evictable=true annotation", "bare pod (no controller)")
    assert found["bare"].owner_kind == ""
    assert found["agent"].blockers == ("DaemonSet pod",)
    assert found["multi"].blockers == (
        "more than one PodDisruptionBudget selects it (ops/ops-a, ops/ops-b); the Eviction API refuses",
    )
    assert found["trainer"].evictable
    assert not any(found[name].evictable for name in ("guarded", "bare", "agent", "multi"))
    # Budgets are listed once per namespace, not once per pod.
    assert sorted(pdb_lists) == [
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets" for ns in ("jobs", "llm", "misc", "ops")
    ]


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        (None, False),  # a null selector selects nothing
        (client.V1LabelSelector(), True),  # an empty one selects the whole namespace (policy/v1)
        (client.V1LabelSelector(match_labels={"app": "llm"}), True),
        (client.V1LabelSelector(match_labels={"app": "llm", "tier": "x"}), False),
        (
            client.V1LabelSelector(
                match_expressions=[client.V1LabelSelectorRequirement("app", "In", ["llm"])]
            ),
            True,
        ),
        (
            client.V1LabelSelector(
                match_expressions=[client.V1LabelSelectorRequirement("app", "NotIn", ["llm"])]
            ),
            False,
        ),
        (
            client.V1LabelSelector(
                match_expressions=[client.V1LabelSelectorRequirement("gone", "NotIn", ["a"])]
            ),
            True,
        ),
        (
            client.V1LabelSelector(match_expressions=[client.V1LabelSelectorRequirement("app", "Exists")]),
            True,
        ),
        (
            client.V1LabelSelector(
                match_expressions=[client.V1LabelSelectorRequirement("app", "DoesNotExist")]
            ),
            False,
        ),
        (
            client.V1LabelSelector(
                match_expressions=[client.V1LabelSelectorRequirement("x", "DoesNotExist")]
            ),
            True,
        ),
        (
            client.V1LabelSelector(match_expressions=[client.V1LabelSelectorRequirement("app", "Gt", ["1"])]),
            False,
        ),
    ],
)
def test_label_selector_semantics(selector: Any, matches: bool) -> None:
    assert selector_matches(selector, {"app": "llm"}) is matches


# -- writing labels --------------------------------------------------------------------------------------------


def test_set_labels_writes_a_merge_patch_guarded_by_the_resource_version(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    before = api.node("h100-0")["metadata"]["resourceVersion"]

    node = cluster.set_labels(
        "h100-0", {MIG: "all-1g.10gb", DP: "h100-1g"}, expected={MIG: "all-balanced", DP: "h100-mig"}
    )

    assert (node.mig_config, node.device_plugin_config) == ("all-1g.10gb", "h100-1g")
    assert api.node("h100-0")["metadata"]["labels"][MIG] == "all-1g.10gb"
    assert node.resource_version == api.node("h100-0")["metadata"]["resourceVersion"] != before
    [patch] = _patches(api)
    assert patch.content_type == MERGE_PATCH == "application/merge-patch+json"
    assert patch.body == {
        "metadata": {"labels": {MIG: "all-1g.10gb", DP: "h100-1g"}, "resourceVersion": before}
    }


def test_a_label_set_to_none_is_removed(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    node = cluster.set_labels("h100-0", {DP: None}, expected={DP: "h100-mig"})

    assert DP not in node.labels and node.device_plugin_config == ""
    assert DP not in api.node("h100-0")["metadata"]["labels"]
    assert _patches(api)[0].body["metadata"]["labels"] == {DP: None}  # JSON null deletes in a merge patch


def test_set_labels_refuses_when_an_expected_label_differs_and_writes_nothing(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    with pytest.raises(LabelsChanged) as raised:
        cluster.set_labels(
            "h100-0", {MIG: "all-1g.10gb"}, expected={MIG: "all-disabled", "x.io/absent": None}
        )

    assert "nvidia.com/mig.config: expected 'all-disabled', found 'all-balanced'" in str(raised.value)
    assert "x.io/absent" not in str(raised.value)  # absent as expected
    assert api.writes() == []


def test_expected_none_means_the_label_must_be_absent(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    with pytest.raises(
        LabelsChanged, match=r"nvidia.com/device-plugin.config: expected absent, found 'h100-mig'"
    ):
        cluster.set_labels("h100-0", {DP: "x"}, expected={DP: None})
    assert api.writes() == []


def test_labels_already_in_place_are_not_written_again(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    node = cluster.set_labels("h100-0", {MIG: "all-balanced"}, expected={MIG: "all-balanced"})

    assert node.mig_config == "all-balanced"
    assert api.writes() == []


def test_set_labels_on_an_unmanaged_node_is_refused(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    with pytest.raises(NodeNotFound):
        cluster.set_labels("other-0", {MIG: "all-1g.10gb"}, expected={})
    assert api.writes() == []


def test_a_concurrent_unrelated_change_is_retried_on_fresh_state(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    # Another writer strikes between the backend's read and its patch.
    api.before_next(
        "PATCH", "/api/v1/nodes/h100-0", lambda: api.set_node_labels_externally("h100-0", {"team": "x"})
    )

    node = cluster.set_labels("h100-0", {MIG: "all-1g.10gb"}, expected={MIG: "all-balanced"})

    assert [p.status for p in _patches(api)] == [409, 200]
    first, second = _patches(api)
    assert first.body["metadata"]["resourceVersion"] != second.body["metadata"]["resourceVersion"]
    assert node.mig_config == "all-1g.10gb"
    assert node.labels["team"] == "x"  # the other writer's change survives


def test_a_concurrent_change_to_an_expected_label_is_not_overwritten(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    api.before_next(
        "PATCH", "/api/v1/nodes/h100-0", lambda: api.set_node_labels_externally("h100-0", {MIG: "mine"})
    )

    with pytest.raises(LabelsChanged, match="expected 'all-balanced', found 'mine'"):
        cluster.set_labels("h100-0", {MIG: "all-1g.10gb"}, expected={MIG: "all-balanced"})

    assert [p.status for p in _patches(api)] == [409]
    assert api.node("h100-0")["metadata"]["labels"][MIG] == "mine"


def test_after_a_conflict_labels_already_as_requested_count_as_written(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    api.before_next(
        "PATCH",
        "/api/v1/nodes/h100-0",
        lambda: api.set_node_labels_externally("h100-0", {MIG: "all-1g.10gb"}),
    )

    node = cluster.set_labels("h100-0", {MIG: "all-1g.10gb"}, expected={MIG: "all-balanced"})

    assert node.mig_config == "all-1g.10gb"
    assert [p.status for p in _patches(api)] == [409]


def test_endless_conflicts_give_up_after_the_retries(api: FakeApiServer) -> None:
    cluster = _backend(api.url, retries=2)
    counter = iter(range(100))

    def another_writer() -> None:
        api.set_node_labels_externally("h100-0", {"n": str(next(counter))})

    for _ in range(3):
        api.before_next("PATCH", "/api/v1/nodes/h100-0", another_writer)

    with pytest.raises(ClusterError, match="still conflicting after 3 attempts"):
        cluster.set_labels("h100-0", {MIG: "all-1g.10gb"}, expected={})
    assert [p.status for p in _patches(api)] == [409, 409, 409]


def test_a_patch_failing_with_503_is_retried(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    api.fail_next("PATCH", "/api/v1/nodes/h100-0", 503)

    node = cluster.set_labels("h100-0", {MIG: "all-1g.10gb"}, expected={MIG: "all-balanced"})

    assert node.mig_config == "all-1g.10gb"
    assert [p.status for p in _patches(api)] == [503, 200]


def test_set_annotations_merges_and_removes(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    node = cluster.set_annotations("a100-0", {"slicewise.io/last-change": None, "slicewise.io/plan": "p-7"})

    assert node.annotations == {"slicewise.io/plan": "p-7"}
    [patch] = _patches(api)
    assert patch.content_type == MERGE_PATCH
    assert patch.body["metadata"]["annotations"] == {
        "slicewise.io/last-change": None,
        "slicewise.io/plan": "p-7",
    }
    assert "resourceVersion" in patch.body["metadata"]


def test_cordon_and_uncordon(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    assert cluster.cordon("h100-0").unschedulable is True
    assert api.node("h100-0")["spec"]["unschedulable"] is True
    assert cluster.cordon("h100-0").unschedulable is True  # already cordoned: nothing written
    assert cluster.uncordon("h100-0").unschedulable is False
    assert api.node("h100-0")["spec"]["unschedulable"] is False

    assert [p.body["spec"] for p in _patches(api)] == [{"unschedulable": True}, {"unschedulable": False}]
    assert all("resourceVersion" in p.body["metadata"] for p in _patches(api))


def test_a_hold_is_the_cordon_and_its_annotation_in_one_patch_and_the_uncordon_drops_it(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    hold = Hold("all-3g.40gb", "default", datetime(2026, 12, 6, 7, 0, tzinfo=UTC))

    node = cluster.cordon("h100-0", hold=hold)
    assert node.held and node.hold() == hold
    assert cluster.cordon("h100-0", hold=hold).held  # already held as asked: nothing written
    node = cluster.uncordon("h100-0")
    assert not node.unschedulable and HOLD_ANNOTATION not in node.annotations

    held, lifted = _patches(api)
    assert held.body["spec"] == {"unschedulable": True}
    assert held.body["metadata"]["annotations"] == {HOLD_ANNOTATION: hold.to_annotation()}
    assert lifted.body["spec"] == {"unschedulable": False}
    assert lifted.body["metadata"]["annotations"] == {HOLD_ANNOTATION: None}
    assert all("resourceVersion" in p.body["metadata"] for p in (held, lifted))


def test_a_node_someone_else_cordoned_is_not_held_and_nothing_is_written(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    api.update_node_externally("h100-0", lambda n: n["spec"].update(unschedulable=True))
    hold = Hold("all-3g.40gb", "default", datetime(2026, 12, 6, 7, 0, tzinfo=UTC))

    with pytest.raises(CordonedByOthers, match="cordoned by someone else"):
        cluster.cordon("h100-0", hold=hold)

    assert _patches(api) == []
    assert HOLD_ANNOTATION not in api.node("h100-0")["metadata"].get("annotations", {})


def test_a_hold_annotation_reads_back_and_one_slicewise_did_not_write_reads_as_unknown() -> None:
    assert Hold.from_annotation("not json") is None
    assert Hold.from_annotation('{"mig.config": "x"}') is None
    hold = Hold("all-balanced", "mps-2", datetime(2026, 12, 6, tzinfo=UTC))
    assert Hold.from_annotation(hold.to_annotation()) == hold


def test_set_taint_adds_and_removes_one_taint_and_keeps_the_others(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    standby = Taint("slicewise.io/standby", "PreferNoSchedule")
    dedicated = {"key": "dedicated", "value": "llm", "effect": "NoSchedule"}
    api.update_node_externally("h100-0", lambda n: n["spec"].update(taints=[dedicated]))

    node = cluster.set_taint("h100-0", standby, True)
    assert set(node.taints) == {Taint("dedicated", "NoSchedule", "llm"), standby}
    assert cluster.set_taint("h100-0", standby, True).taints == node.taints  # already there: nothing written
    assert cluster.set_taint("h100-0", standby, False).taints == (Taint("dedicated", "NoSchedule", "llm"),)
    assert api.node("h100-0")["spec"]["taints"] == [dedicated]
    assert cluster.set_taint("h100-0", standby, False).taints == (Taint("dedicated", "NoSchedule", "llm"),)
    patches = _patches(api)
    assert len(patches) == 2 and all("resourceVersion" in p.body["metadata"] for p in patches)


def test_a_taint_another_controller_adds_meanwhile_survives(
    api: FakeApiServer, cluster: KubernetesCluster
) -> None:
    # The node lifecycle controller adds its unschedulable taint between the backend's read and its write: the
    # guarded write conflicts, the node is read again, and both taints end up on it.
    unschedulable = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    api.before_next(
        "PATCH",
        "/api/v1/nodes/h100-0",
        lambda: api.update_node_externally("h100-0", lambda n: n["spec"].update(taints=[unschedulable])),
    )

    node = cluster.set_taint("h100-0", Taint("slicewise.io/standby", "PreferNoSchedule"), True)

    assert [p.status for p in _patches(api)] == [409, 200]
    assert {t.key for t in node.taints} == {"node.kubernetes.io/unschedulable", "slicewise.io/standby"}


# -- eviction --------------------------------------------------------------------------------------------------


@pytest.fixture
def guarded() -> Iterator[FakeApiServer]:
    pods = [
        gpu_pod("llm", "serve-0", node="h100-0", gpus={"nvidia.com/mig-1g.10gb": 1}, labels={"app": "llm"}),
        gpu_pod("llm", "serve-1", node="h100-0", gpus={"nvidia.com/mig-1g.10gb": 1}, labels={"app": "llm"}),
        gpu_pod("batch", "job-0", node="h100-0", gpus={"nvidia.com/gpu": 1}, labels={"app": "b"}),
    ]
    pdbs = [pdb("llm", "llm-pdb", disruptions_allowed=1, match_labels={"app": "llm"})]
    with FakeApiServer(nodes=_nodes(), pods=pods, pdbs=pdbs) as server:
        yield server


def test_evict_posts_a_policy_v1_eviction(guarded: FakeApiServer) -> None:
    _backend(guarded.url).evict("batch", "job-0")

    assert guarded.pod("batch", "job-0") is None
    [post] = guarded.writes()
    assert (post.method, post.path, post.status) == (
        "POST",
        "/api/v1/namespaces/batch/pods/job-0/eviction",
        201,
    )
    assert post.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "job-0", "namespace": "batch"},
    }


def test_a_budget_with_no_disruption_left_blocks_eviction(guarded: FakeApiServer) -> None:
    cluster = _backend(guarded.url)
    cluster.evict("llm", "serve-0")  # uses the budget's one allowed disruption
    assert guarded.pdb("llm", "llm-pdb")["status"]["disruptionsAllowed"] == 0

    with pytest.raises(EvictionBlocked, match="would violate the pod's disruption budget") as raised:
        cluster.evict("llm", "serve-1")

    assert "llm-pdb needs 1 healthy pods" in str(raised.value)
    assert guarded.pod("llm", "serve-1") is not None
    assert [w.status for w in guarded.writes()] == [201, 429]  # a PDB refusal is not retried
    serve_1 = next(p for p in cluster.list_gpu_pods("h100-0") if p.name == "serve-1")
    assert serve_1.blockers == ("PodDisruptionBudget llm/llm-pdb allows 0 disruptions",)


def test_evicting_a_pod_that_is_already_gone_is_fine(guarded: FakeApiServer) -> None:
    _backend(guarded.url).evict("batch", "vanished")

    assert [w.status for w in guarded.writes()] == [404]


def test_an_eviction_refused_for_other_reasons_is_a_cluster_error(guarded: FakeApiServer) -> None:
    guarded.add_pdb(pdb("llm", "second", disruptions_allowed=5, match_labels={"app": "llm"}))

    with pytest.raises(ClusterError, match="more than one PodDisruptionBudget") as raised:
        _backend(guarded.url).evict("llm", "serve-0")

    assert not isinstance(raised.value, EvictionBlocked)
    assert "evict pod llm/serve-0: HTTP 500" in str(raised.value)


# -- failures --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_read_failures_are_retried(
    api: FakeApiServer, cluster: KubernetesCluster, status: int
) -> None:
    api.fail_next("GET", "/api/v1/nodes", status)

    assert len(cluster.list_nodes()) == 3
    assert [r.status for r in api.requests] == [status, 200]


def test_a_persistent_outage_ends_in_a_cluster_error(api: FakeApiServer) -> None:
    cluster = _backend(api.url, retries=2)
    for _ in range(3):
        api.fail_next("GET", "/api/v1/nodes", 503, "etcdserver: request timed out")

    with pytest.raises(ClusterError, match=r"list nodes: HTTP 503 .*etcdserver: request timed out"):
        cluster.list_nodes()
    assert len(api.requests) == 3


def test_forbidden_is_not_retried_and_points_at_rbac(api: FakeApiServer, cluster: KubernetesCluster) -> None:
    api.fail_next("GET", "/api/v1/nodes/h100-0", 403, 'nodes "h100-0" is forbidden')

    with pytest.raises(ClusterError, match=r"read node h100-0: HTTP 403 .*forbidden.*rbac.yaml"):
        cluster.get_node("h100-0")
    assert len(api.requests) == 1


def test_an_unreachable_server_is_a_clear_cluster_error() -> None:
    with FakeApiServer() as api:
        url = api.url  # the port is free again once the stand-in stops
    cluster = _backend(url, retries=1)

    with pytest.raises(ClusterError, match=rf"list nodes: cannot reach the Kubernetes API server at {url}"):
        cluster.list_nodes()


# -- the client as it really behaves, and the Airflow connection ---------------------------------------------


def test_the_client_sends_strategic_merge_patch_for_a_dict_unless_told(api: FakeApiServer) -> None:
    """Why the backend passes ``_content_type``: a dict body alone goes out as strategic merge patch."""
    configuration = client.Configuration()
    configuration.host = api.url
    core = client.CoreV1Api(client.ApiClient(configuration))

    core.patch_node("h100-1", {"metadata": {"labels": {"a": "1"}}})
    core.patch_node("h100-1", {"metadata": {"labels": {"a": "2"}}}, _content_type=MERGE_PATCH)

    assert [p.content_type for p in _patches(api)] == ["application/strategic-merge-patch+json", MERGE_PATCH]
    assert api.node("h100-1")["metadata"]["labels"]["a"] == "2"


def test_from_connection_reads_the_kubeconfig_of_the_airflow_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hook loads kubeconfigs into the client's process-wide default configuration: restore it afterwards.
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    with FakeApiServer(nodes=_nodes(), token="s3cret") as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url, token="s3cret")
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", kubernetes_connection_json(kubeconfig))

        cluster = KubernetesCluster.from_connection("kubernetes_default")

        assert cluster.name == "kubernetes"
        assert [n.name for n in cluster.list_nodes()] == ["a100-0", "h100-0", "h100-1"]


def test_from_connection_with_a_broken_kubeconfig_is_a_cluster_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", kubernetes_connection_json(tmp_path / "missing"))

    with pytest.raises(
        ClusterError, match="cannot configure a Kubernetes client from connection 'kubernetes_default'"
    ):
        KubernetesCluster.from_connection()


# -- the stand-in itself ---------------------------------------------------------------------------------------


def test_the_stand_in_answers_like_an_api_server(api: FakeApiServer) -> None:
    configuration = client.Configuration()
    configuration.host = api.url
    core = client.CoreV1Api(client.ApiClient(configuration))
    stale = api.node("h100-0")["metadata"]["resourceVersion"]
    api.set_node_labels_externally("h100-0", {"x": "1"})

    with pytest.raises(client.ApiException) as conflict:
        core.patch_node(
            "h100-0",
            {"metadata": {"resourceVersion": stale, "labels": {"y": "1"}}},
            _content_type=MERGE_PATCH,
        )
    assert conflict.value.status == 409 and '"reason": "Conflict"' in conflict.value.body
    with pytest.raises(client.ApiException) as invalid:
        core.patch_node("h100-0", {"metadata": {"labels": {"bad key": "v"}}}, _content_type=MERGE_PATCH)
    assert invalid.value.status == 422
    with pytest.raises(client.ApiException) as missing:
        core.read_namespace("default")
    assert missing.value.status == 404

    # A write that changes nothing keeps the resourceVersion, as etcd would.
    current = api.node("h100-0")["metadata"]["resourceVersion"]
    core.patch_node("h100-0", {"metadata": {"labels": {"x": "1"}}}, _content_type=MERGE_PATCH)
    assert api.node("h100-0")["metadata"]["resourceVersion"] == current

    selected = core.list_node(
        label_selector="nvidia.com/mig.config in (all-disabled,x),!nope,slicewise.io/managed"
    )
    assert [n.metadata.name for n in selected.items] == ["a100-0"]
    assert [n.metadata.name for n in core.list_node(label_selector="slicewise.io/managed!=true").items] == [
        "other-0"
    ]
    assert selected.metadata.resource_version
