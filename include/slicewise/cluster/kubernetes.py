"""The ``kubernetes`` cluster backend: GPU Operator labels and the Eviction API through the official client.

Built from an Airflow Connection with :meth:`KubernetesCluster.from_connection` (the cncf-kubernetes
provider's ``KubernetesHook`` resolves in-cluster config or a kubeconfig from the connection's extras), or
from a ready ``kubernetes.client.ApiClient``. Mapping API objects to Slicewise's data is in
:mod:`slicewise.cluster.k8s_mapping`; this module only talks to the API server.

Every node write is a JSON merge patch that carries the node's ``metadata.resourceVersion`` from the read
that justified it, so the API server refuses it (409 Conflict) if anyone changed the node in between; the
backend then re-reads and re-checks instead of overwriting.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from slicewise.cluster.base import (
    HOLD_ANNOTATION,
    MANAGED_LABEL,
    ClusterError,
    ConfigMap,
    ConfigMapChanged,
    ConfigMapNotFound,
    CordonedByOthers,
    EvictionBlocked,
    GpuNode,
    GpuPod,
    Hold,
    LabelsChanged,
    NodeNotFound,
    Taint,
)
from slicewise.cluster.k8s_mapping import gpu_pod_from_api, labels_differing, node_from_api, pod_gpu_requests

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)
T = TypeVar("T")

#: (API group, resource, verb) for every request this backend makes; include/k8s/rbac.yaml grants exactly these.
REQUIRED_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("", "nodes", "list"),  # list_nodes
        ("", "nodes", "get"),  # get_node and the read before every write
        ("", "nodes", "patch"),  # labels, annotations, cordon/uncordon
        ("", "pods", "list"),  # list_gpu_pods (all namespaces, field selector on the node)
        ("", "pods/eviction", "create"),  # evict
        ("policy", "poddisruptionbudgets", "list"),  # evictability: which PDBs cover a pod
        ("", "configmaps", "get"),  # get_config_map: the priority expander's, before a write
        ("", "configmaps", "patch"),  # update_config_map: the priority expander's ranking
    }
)

#: RFC 7386 JSON merge patch: maps merge, a null value deletes the key. The client would otherwise pick
#: strategic merge patch for a dict body; for labels, annotations and a bool they behave the same, but a merge
#: patch says exactly what it does and is what ``kubectl patch --type merge`` sends.
MERGE_PATCH = "application/merge-patch+json"

# Statuses worth retrying: the API server is restarting or shedding load (API Priority and Fairness answers
# 429 with Retry-After). A 429 from the Eviction API means a PodDisruptionBudget refused; never retried here.
_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
_TRANSIENT_EVICTION_STATUSES = frozenset({502, 503, 504})


class _ApiCallFailed(ClusterError):
    """An API call failed for good; keeps the HTTP status so callers can map 404, 409 and 429."""

    def __init__(self, message: str, status: int, server_message: str) -> None:
        super().__init__(message)
        self.status = status
        self.server_message = server_message


class KubernetesCluster:
    """:class:`~slicewise.cluster.base.ClusterBackend` over the Kubernetes API."""

    name = "kubernetes"

    def __init__(
        self,
        api_client: ApiClient,
        *,
        retries: int = 3,
        backoff_s: float = 0.5,
        timeout_s: float = 30.0,
    ) -> None:
        """``retries`` bounds both the retries of a transient failure and the re-reads after a write conflict;
        ``timeout_s`` is the read timeout of each request (connecting gets at most 10 s)."""
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._policy = client.PolicyV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._retries = max(retries, 0)
        self._backoff_s = backoff_s
        self._timeout = (min(10.0, timeout_s), timeout_s)

    @classmethod
    def from_connection(cls, conn_id: str = "kubernetes_default", **kwargs: Any) -> KubernetesCluster:
        """The backend for the Airflow Connection ``conn_id`` (extras ``in_cluster``, ``kube_config_path``,
        ``kube_config``, ``cluster_context``, as the cncf-kubernetes provider reads them). Call inside tasks."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        # No client_configuration of our own: the hook's in-cluster branch loads into the process default
        # configuration and would ignore one passed here.
        hook = KubernetesHook(conn_id=conn_id)
        try:
            api_client = hook.api_client
        except Exception as exc:  # config loading raises several unrelated types; the message is what helps
            raise ClusterError(
                f"cannot configure a Kubernetes client from connection {conn_id!r}: {exc}"
            ) from exc
        return cls(api_client, **kwargs)

    # -- reads -----------------------------------------------------------------------------------------------

    def list_nodes(self) -> list[GpuNode]:
        """Managed GPU nodes (label ``slicewise.io/managed=true``), sorted by name."""
        answer = self._call(
            "list nodes",
            lambda: self._core.list_node(
                label_selector=f"{MANAGED_LABEL}=true", _request_timeout=self._timeout
            ),
        )
        return sorted((node_from_api(n) for n in answer.items), key=lambda n: n.name)

    def get_node(self, name: str) -> GpuNode:
        """One managed node, fresh; NodeNotFound when it does not exist or is not opted in."""
        try:
            answer = self._call(
                f"read node {name}", lambda: self._core.read_node(name, _request_timeout=self._timeout)
            )
        except _ApiCallFailed as exc:
            if exc.status == 404:
                raise NodeNotFound(f"node {name} does not exist") from exc
            raise
        node = node_from_api(answer)
        if node.labels.get(MANAGED_LABEL) != "true":
            raise NodeNotFound(f"node {name} is not managed by Slicewise (no {MANAGED_LABEL}=true label)")
        return node

    def list_gpu_pods(self, node: str) -> list[GpuPod]:
        """Unfinished pods on ``node`` requesting GPU resources, with their evictability, sorted by
        namespace and name. PodDisruptionBudgets are listed once per namespace that has such a pod."""
        selector = f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        answer = self._call(
            f"list pods on node {node}",
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=selector, _request_timeout=self._timeout
            ),
        )
        pdbs_by_namespace: dict[str, list[Any]] = {}
        pods: list[GpuPod] = []
        for pod in answer.items:
            if not pod_gpu_requests(pod):
                continue  # not a GPU pod: no need to look at its namespace's budgets
            namespace = pod.metadata.namespace or ""
            if namespace not in pdbs_by_namespace:
                pdbs_by_namespace[namespace] = self._list_pdbs(namespace)
            gpu_pod = gpu_pod_from_api(pod, pdbs_by_namespace[namespace])
            if gpu_pod is not None:
                pods.append(gpu_pod)
        return sorted(pods, key=lambda p: (p.namespace, p.name))

    def _list_pdbs(self, namespace: str) -> list[Any]:
        answer = self._call(
            f"list PodDisruptionBudgets in namespace {namespace}",
            lambda: self._policy.list_namespaced_pod_disruption_budget(
                namespace, _request_timeout=self._timeout
            ),
        )
        return list(answer.items)

    # -- writes ----------------------------------------------------------------------------------------------

    def set_labels(
        self, node: str, changes: Mapping[str, str | None], *, expected: Mapping[str, str | None]
    ) -> GpuNode:
        """Set (value) or remove (None) labels if every ``expected`` label still holds (None = absent), else
        raise LabelsChanged having written nothing. Nothing is written when the labels are already as asked.

        After a write conflict the node is read again: if it now carries exactly the requested labels (our
        own earlier attempt landed, or someone made the same change) that counts as done; otherwise
        ``expected`` is checked again on the fresh state."""
        wanted = dict(changes)

        def plan(current: GpuNode, after_conflict: bool) -> dict[str, Any] | None:
            in_place = all(current.labels.get(k) == v for k, v in wanted.items())
            if in_place and after_conflict:
                return None
            differing = labels_differing(current.labels, expected)
            if differing:
                raise LabelsChanged(
                    f"node {node}: labels are not as expected, nothing written: {'; '.join(differing)}"
                )
            return None if in_place else {"metadata": {"labels": wanted}}

        return self._guarded_patch(node, "set labels", plan)

    def set_annotations(self, node: str, changes: Mapping[str, str | None]) -> GpuNode:
        """Set (value) or remove (None) node annotations; nothing is written when already as asked."""
        wanted = dict(changes)

        def plan(current: GpuNode, after_conflict: bool) -> dict[str, Any] | None:
            if all(current.annotations.get(k) == v for k, v in wanted.items()):
                return None
            return {"metadata": {"annotations": wanted}}

        return self._guarded_patch(node, "set annotations", plan)

    def set_taint(self, node: str, taint: Taint, present: bool) -> GpuNode:
        """Add or remove one taint (by key and effect), keeping the others. ``spec.taints`` has no merge key,
        so the whole list is written, guarded by the resourceVersion it was read at (a conflict re-reads)."""

        def plan(current: GpuNode, after_conflict: bool) -> dict[str, Any] | None:
            others = [t for t in current.taints if not t.same(taint)]
            if (len(others) < len(current.taints)) == present:
                return None
            wanted = [*others, taint] if present else others
            return {
                "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in wanted]}
            }

        return self._guarded_patch(node, f"{'add' if present else 'remove'} taint {taint.key}", plan)

    def cordon(self, node: str, *, hold: Hold | None = None) -> GpuNode:
        """Mark the node unschedulable (``spec.unschedulable: true``), as ``kubectl cordon`` does; with ``hold``,
        :data:`HOLD_ANNOTATION` in the same patch, refused on a node cordoned by someone else (checked on the
        state the guarded patch writes against)."""
        value = hold.to_annotation() if hold is not None else None

        def plan(current: GpuNode, after_conflict: bool) -> dict[str, Any] | None:
            if value is None:
                return None if current.unschedulable else {"spec": {"unschedulable": True}}
            if current.unschedulable and HOLD_ANNOTATION not in current.annotations:
                raise CordonedByOthers(f"node {node} is cordoned by someone else: not Slicewise's to hold")
            if current.unschedulable and current.annotations.get(HOLD_ANNOTATION) == value:
                return None
            return {"spec": {"unschedulable": True}, "metadata": {"annotations": {HOLD_ANNOTATION: value}}}

        return self._guarded_patch(node, "hold" if hold is not None else "cordon", plan)

    def uncordon(self, node: str) -> GpuNode:
        """Make the node schedulable again (``spec.unschedulable: false``), as ``kubectl uncordon`` does, and
        drop Slicewise's hold annotation in the same patch."""

        def plan(current: GpuNode, after_conflict: bool) -> dict[str, Any] | None:
            held = HOLD_ANNOTATION in current.annotations
            if not current.unschedulable and not held:
                return None
            patch: dict[str, Any] = {"spec": {"unschedulable": False}}
            if held:
                patch["metadata"] = {"annotations": {HOLD_ANNOTATION: None}}
            return patch

        return self._guarded_patch(node, "uncordon", plan)

    def evict(self, namespace: str, pod: str) -> None:
        """Evict through the policy/v1 Eviction API. HTTP 429 (a PodDisruptionBudget refuses) raises
        EvictionBlocked with the server's words; a pod that is already gone counts as evicted."""
        from kubernetes.client import V1Eviction, V1ObjectMeta

        body = V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=V1ObjectMeta(name=pod, namespace=namespace)
        )
        try:
            self._call(
                f"evict pod {namespace}/{pod}",
                lambda: self._core.create_namespaced_pod_eviction(
                    pod, namespace, body, _request_timeout=self._timeout
                ),
                transient=_TRANSIENT_EVICTION_STATUSES,
            )
        except _ApiCallFailed as exc:
            if exc.status == 429:
                raise EvictionBlocked(
                    f"eviction of pod {namespace}/{pod} refused: {exc.server_message}"
                ) from exc
            if exc.status == 404:
                log.info("pod %s/%s is already gone; nothing to evict", namespace, pod)
                return
            raise

    def get_config_map(self, namespace: str, name: str) -> ConfigMap:
        """One ConfigMap, fresh; ConfigMapNotFound when it does not exist."""
        try:
            answer = self._call(
                f"read configmap {namespace}/{name}",
                lambda: self._core.read_namespaced_config_map(
                    name, namespace, _request_timeout=self._timeout
                ),
            )
        except _ApiCallFailed as exc:
            if exc.status == 404:
                raise ConfigMapNotFound(f"configmap {namespace}/{name} does not exist") from exc
            raise
        return _config_map_from_api(answer)

    def update_config_map(
        self, read: ConfigMap, data: Mapping[str, str], annotations: Mapping[str, str | None]
    ) -> ConfigMap:
        """One merge patch of ``data`` and ``annotations``, guarded by ``read``'s resourceVersion: 409 Conflict
        raises ConfigMapChanged (the caller re-reads and decides again)."""
        what = f"patch configmap {read.namespace}/{read.name}"
        patch = {
            "metadata": {"resourceVersion": read.resource_version, "annotations": dict(annotations)},
            "data": dict(data),
        }
        try:
            written = self._call(
                what,
                partial(
                    self._core.patch_namespaced_config_map,
                    read.name,
                    read.namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    _request_timeout=self._timeout,
                ),
            )
        except _ApiCallFailed as exc:
            if exc.status == 409:
                raise ConfigMapChanged(f"{what}: changed since it was read ({exc.server_message})") from exc
            if exc.status == 404:
                raise ConfigMapNotFound(f"{what}: it was deleted since it was read") from exc
            raise
        return _config_map_from_api(written)

    # -- plumbing --------------------------------------------------------------------------------------------

    def _guarded_patch(
        self, node: str, what: str, plan: Callable[[GpuNode, bool], dict[str, Any] | None]
    ) -> GpuNode:
        """Read the node, let ``plan`` decide the merge patch (None = nothing to do; it may raise), and send it
        guarded by the read's resourceVersion. On 409 Conflict start over from a fresh read, at most
        ``retries`` times."""
        for attempt in range(self._retries + 1):
            current = self.get_node(node)
            patch = plan(current, attempt > 0)
            if patch is None:
                return current
            patch.setdefault("metadata", {})["resourceVersion"] = current.resource_version
            try:
                written = self._call(
                    f"patch node {node} ({what})",
                    partial(
                        self._core.patch_node,
                        node,
                        patch,
                        _content_type=MERGE_PATCH,
                        _request_timeout=self._timeout,
                    ),
                )
            except _ApiCallFailed as exc:
                if exc.status == 409:
                    log.info("node %s changed while we wrote (%s); re-reading", node, exc.server_message)
                    continue
                if exc.status == 404:
                    raise NodeNotFound(f"node {node} disappeared while patching it ({what})") from exc
                raise
            return node_from_api(written)
        raise ClusterError(
            f"patch node {node} ({what}): still conflicting after {self._retries + 1} attempts; "
            "another writer keeps changing the node"
        )

    def _call(
        self, what: str, request: Callable[[], T], *, transient: Collection[int] = _TRANSIENT_STATUSES
    ) -> T:
        """Run one API request. Connection failures and ``transient`` statuses are retried with exponential
        backoff at most ``retries`` times; any failure then surfaces as ClusterError saying which call failed
        and why (an :class:`_ApiCallFailed` carrying the HTTP status when the server answered)."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        def retryable(exc: BaseException) -> bool:
            if isinstance(exc, ApiException):
                return exc.status in transient
            return isinstance(exc, urllib3.exceptions.HTTPError)

        retrying = Retrying(
            stop=stop_after_attempt(self._retries + 1),
            wait=wait_exponential(multiplier=self._backoff_s, max=max(self._backoff_s * 8, 0.0)),
            retry=retry_if_exception(retryable),
            before_sleep=lambda state: log.warning(
                "%s: transient failure (attempt %d), retrying: %s",
                what,
                state.attempt_number,
                state.outcome.exception() if state.outcome else "",
            ),
            reraise=True,
        )
        try:
            return retrying(request)
        except ApiException as exc:
            raise _api_failure(what, exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(
                f"{what}: cannot reach the Kubernetes API server at {self._host}: {exc}"
            ) from exc


def _config_map_from_api(answer: Any) -> ConfigMap:
    meta = answer.metadata
    return ConfigMap(
        namespace=str(meta.namespace),
        name=str(meta.name),
        data=dict(answer.data or {}),
        annotations=dict(meta.annotations or {}),
        resource_version=str(meta.resource_version or ""),
    )


def _api_failure(what: str, exc: Any) -> _ApiCallFailed:
    """An ApiException as a ClusterError quoting the server's Status message (status 0: TLS and other
    client-side failures, which the client reports as ApiException too)."""
    status = int(exc.status or 0)
    server_message = _status_message(exc.body) or str(exc.reason or "").strip()
    hint = ""
    if status in (401, 403):
        hint = " (check the credentials and the slicewise ClusterRole in include/k8s/rbac.yaml)"
    return _ApiCallFailed(
        f"{what}: HTTP {status} {exc.reason}: {server_message}{hint}", status, server_message
    )


def _status_message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status body, with its ``details.causes`` messages appended."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        status = json.loads(body) if body else {}
    except (TypeError, ValueError):
        return str(body or "").strip()
    if not isinstance(status, dict):
        return ""
    message = str(status.get("message", ""))
    causes = [
        c.get("message", "") for c in (status.get("details") or {}).get("causes", []) if isinstance(c, dict)
    ]
    causes = [c for c in causes if c]
    return f"{message} ({'; '.join(causes)})" if message and causes else message or "; ".join(causes)
