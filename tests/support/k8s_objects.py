"""Plain-dict Kubernetes objects shaped like a real GPU Operator cluster, and a kubeconfig for the stand-in.

The dicts are what ``kubectl get -o json`` shows (minus server-set noise), so they can seed
:class:`tests.support.fake_apiserver.FakeApiServer` or be compared with what it stores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

#: Labels GPU Feature Discovery and the GPU Operator put on every MIG-capable node, besides the per-node ones.
_GFD_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.deploy.mig-manager": "true",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}


def gpu_node(
    name: str,
    *,
    product: str,
    gpu_count: int,
    mig_config: str | None,
    allocatable: Mapping[str, int | str],
    mig_state: str | None = "success",
    device_plugin_config: str | None = None,
    managed: bool = True,
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One node as the GPU Operator leaves it: GFD labels, ``mig.config`` + ``mig.config.state`` (None: absent), and
    ``status.allocatable`` with cpu/memory/pods plus the given GPU resources (e.g. ``{"nvidia.com/gpu": 8}``
    or ``{"nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}``)."""
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gpu",
        **_GFD_LABELS,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpu_count),
    }
    # A node whose GPUs have no MIG has no MIG manager, so neither label (mig_config None).
    if mig_config is not None:
        node_labels["nvidia.com/mig.config"] = mig_config
    if mig_state is not None:
        node_labels["nvidia.com/mig.config.state"] = mig_state
    if device_plugin_config is not None:
        node_labels["nvidia.com/device-plugin.config"] = device_plugin_config
    if managed:
        node_labels["slicewise.io/managed"] = "true"
    node_labels.update(labels or {})
    resources = {"cpu": "96", "memory": "1056478532Ki", "pods": "110", "ephemeral-storage": "1844Gi"}
    resources.update({k: str(v) for k, v in allocatable.items()})
    spec: dict[str, Any] = {"providerID": f"stand-in://{name}"}
    if unschedulable:
        spec["unschedulable"] = True
        spec["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": node_labels, "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def fleet_nodes(prefix: str, count: int, **node: Any) -> list[dict[str, Any]]:
    """``count`` identical nodes ``<prefix>-0`` ... ``<prefix>-<count-1>``; ``node`` as for :func:`gpu_node`."""
    return [gpu_node(f"{prefix}-{i}", **node) for i in range(count)]


def gpu_pod(
    namespace: str,
    name: str,
    *,
    node: str,
    gpus: Mapping[str, int],
    phase: str = "Running",
    owner: tuple[str, str] | None = ("ReplicaSet", "workload-5d8f7c"),
    evictable: bool = True,
    labels: Mapping[str, str] | None = None,
    init_gpus: Mapping[str, int] | None = None,
    annotations: Mapping[str, str] | None = None,
    started: str | None = None,
) -> dict[str, Any]:
    """A pod with one container asking for ``gpus`` as limits (how extended resources are usually written;
    the stand-in defaults the requests from them, like the API server), optionally an init container asking
    for ``init_gpus``, the controller owner reference ``owner`` (None: a bare pod), and ``status.startTime``
    ``started`` (RFC 3339; None: not set, as for a pod the kubelet has not started)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {"app": name}),
        "annotations": {**({"slicewise.io/evictable": "true"} if evictable else {}), **(annotations or {})},
    }
    if owner is not None:
        kind, owner_name = owner
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{owner_name}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Always",
        "containers": [_container("main", gpus)],
    }
    if init_gpus:
        spec["initContainers"] = [_container("init", init_gpus)]
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["startTime"] = started
    return {"metadata": metadata, "spec": spec, "status": status}


def _container(name: str, gpus: Mapping[str, int]) -> dict[str, Any]:
    limits = {"cpu": "4", "memory": "32Gi", **{k: str(v) for k, v in gpus.items()}}
    return {"name": name, "image": "registry.example/workload:1", "resources": {"limits": limits}}


def pdb(
    namespace: str,
    name: str,
    *,
    disruptions_allowed: int,
    match_labels: Mapping[str, str] | None = None,
    match_expressions: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget with its status as the disruption controller reports it."""
    selector: dict[str, Any] = {}
    if match_labels is not None:
        selector["matchLabels"] = dict(match_labels)
    if match_expressions is not None:
        selector["matchExpressions"] = [dict(e) for e in match_expressions]
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": selector},
        "status": {
            "disruptionsAllowed": disruptions_allowed,
            "currentHealthy": 1 + disruptions_allowed,
            "desiredHealthy": 1,
            "expectedPods": 1 + disruptions_allowed,
        },
    }


def write_kubeconfig(path: Path, server_url: str, *, token: str = "stand-in-token") -> Path:
    """A kubeconfig with one context pointing at ``server_url`` with a bearer token; returns ``path``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stand-in", "cluster": {"server": server_url}}],
        "users": [{"name": "slicewise", "user": {"token": token}}],
        "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "slicewise"}}],
        "current-context": "stand-in",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def kubernetes_connection_json(kubeconfig: Path, *, namespace: str = "default") -> str:
    """The value of ``AIRFLOW_CONN_KUBERNETES_DEFAULT`` for a connection that reads ``kubeconfig``."""
    return json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}
    )
