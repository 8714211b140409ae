"""include/k8s/rbac.yaml grants the ``kubernetes`` backend exactly what it uses: no less, no more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from slicewise.cluster.base import PRIORITY_EXPANDER_CONFIG_MAP, ClusterError, EvictionBlocked
from slicewise.cluster.kubernetes import REQUIRED_PERMISSIONS, KubernetesCluster
from tests.support.fake_apiserver import FakeApiServer, fleet_nodes, gpu_pod, pdb

MANIFEST = Path(__file__).resolve().parents[2] / "include" / "k8s" / "rbac.yaml"


def _documents() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc}


def granted() -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) the ClusterRole and the Role grant, rules expanded."""
    docs = _documents()
    return {
        (group, resource, verb)
        for role in (docs["ClusterRole"], docs["Role"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_cluster_role_grants_exactly_the_required_permissions() -> None:
    assert granted() == set(REQUIRED_PERMISSIONS)
    assert not any("*" in part for permission in granted() for part in permission)


def test_the_service_account_is_bound_to_the_role() -> None:
    docs = _documents()
    account, role, binding = docs["ServiceAccount"], docs["ClusterRole"], docs["ClusterRoleBinding"]

    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == ("slicewise", "slicewise")
    assert role["metadata"]["name"] == "slicewise-node-manager"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "slicewise-node-manager",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slicewise", "namespace": "slicewise"}]


def test_the_configmap_grant_names_only_the_priority_expander_in_the_autoscaler_namespace() -> None:
    docs = _documents()
    role, binding = docs["Role"], docs["RoleBinding"]

    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kube-system"
    assert [rule["resourceNames"] for rule in role["rules"]] == [[PRIORITY_EXPANDER_CONFIG_MAP]]
    assert "create" not in {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slicewise", "namespace": "slicewise"}]


def test_every_request_of_the_backend_is_allowed_and_every_grant_is_used() -> None:
    """Drive every backend operation against a stand-in that enforces the manifest's rules (403 otherwise),
    then compare the permissions the recorded requests needed with what the role grants."""
    allowed = granted()
    nodes = fleet_nodes(
        "h100",
        1,
        product="NVIDIA-H100-80GB-HBM3",
        gpu_count=8,
        mig_config="all-disabled",
        allocatable={"nvidia.com/gpu": 8},
    )
    one_gpu = {"nvidia.com/gpu": 1}
    pods = [
        gpu_pod("llm", "serve-0", node="h100-0", gpus=one_gpu, labels={"app": "llm"}),
        gpu_pod("batch", "job-0", node="h100-0", gpus=one_gpu),
    ]
    pdbs = [pdb("llm", "llm-pdb", disruptions_allowed=0, match_labels={"app": "llm"})]
    priorities = {
        "metadata": {"name": PRIORITY_EXPANDER_CONFIG_MAP, "namespace": "kube-system"},
        "data": {"priorities": "10:\n  - .*\n"},
    }
    with FakeApiServer(nodes=nodes, pods=pods, pdbs=pdbs, config_maps=[priorities], rbac=allowed) as api:
        configuration = client.Configuration()
        configuration.host = api.url
        cluster = KubernetesCluster(client.ApiClient(configuration), backoff_s=0.0)

        cluster.list_nodes()
        cluster.get_node("h100-0")
        cluster.list_gpu_pods("h100-0")
        cluster.cordon("h100-0")
        cluster.evict("batch", "job-0")
        with pytest.raises(EvictionBlocked):
            cluster.evict("llm", "serve-0")
        cluster.set_labels("h100-0", {"nvidia.com/mig.config": "all-1g.10gb"}, expected={})
        cluster.set_annotations("h100-0", {"slicewise.io/last-change": "2026-01-01T00:00:00Z"})
        cluster.uncordon("h100-0")
        read = cluster.get_config_map("kube-system", PRIORITY_EXPANDER_CONFIG_MAP)
        cluster.update_config_map(read, {"priorities": "20:\n  - .*\n"}, {})

        assert [r for r in api.requests if r.status == 403] == []
        assert {r.permission for r in api.requests} == allowed


def test_a_missing_grant_surfaces_as_a_forbidden_cluster_error() -> None:
    """The stand-in's RBAC check is real: withhold one permission and the backend's call is refused."""
    allowed = granted() - {("", "nodes", "patch")}
    nodes = fleet_nodes(
        "h100",
        1,
        product="NVIDIA-H100-80GB-HBM3",
        gpu_count=8,
        mig_config="all-disabled",
        allocatable={"nvidia.com/gpu": 8},
    )
    with FakeApiServer(nodes=nodes, rbac=allowed) as api:
        configuration = client.Configuration()
        configuration.host = api.url
        cluster = KubernetesCluster(client.ApiClient(configuration), backoff_s=0.0)

        with pytest.raises(
            ClusterError, match=r"patch node h100-0 \(cordon\): HTTP 403 .*cannot patch resource"
        ):
            cluster.cordon("h100-0")
