"""A local stand-in for the Kubernetes API server: exactly the endpoints Slicewise's backend uses.

No cluster can run on the test machine, so this plays one on ``127.0.0.1`` over real HTTP, with the JSON
shapes, status codes and messages of the real API server, so the real ``kubernetes`` client talks to it
unmodified. What it implements, and how faithfully:

* ``GET /api/v1/nodes`` (``labelSelector``: ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``),
  ``GET /api/v1/nodes/{name}``.
* ``PATCH /api/v1/nodes/{name}`` as JSON merge patch or strategic merge patch (identical for maps and
  scalars, which is all the backend sends; a strategic patch with lists is refused rather than merged
  wrongly). A ``metadata.resourceVersion`` in the body is a precondition: a stale one gets 409 Conflict. An
  accepted write that changes something bumps the resourceVersion; a no-op write does not (as in etcd).
  Label keys and values are validated like the API server does (422 Invalid).
* ``GET /api/v1/pods`` (all namespaces; ``fieldSelector`` with ``=``/``==``/``!=`` on the pod fields the
  API server supports, ``labelSelector``).
* ``GET /apis/policy/v1/namespaces/{ns}/poddisruptionbudgets``.
* ``GET`` and ``PATCH /api/v1/namespaces/{ns}/configmaps/{name}`` (the patch as for nodes, without label checks).
* ``POST /api/v1/namespaces/{ns}/pods/{name}/eviction``: PodDisruptionBudget check as the eviction
  registry does it (pending and finished pods skip it; two budgets → 500; none allowed → 429), then the pod
  is deleted at once (no graceful termination) and the budget's ``disruptionsAllowed`` goes down by one.

Every request is recorded; :meth:`FakeApiServer.fail_next` and :meth:`FakeApiServer.before_next` inject
failures and concurrent writers; ``rbac`` (optional) answers 403 for requests outside a set of
(apiGroup, resource, verb) permissions, like the RBAC authorizer.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.apiserver_rules import (
    ApiError,
    Permission,
    field_selector,
    has_list,
    label_selector,
    merge_patch,
    permission_for,
    status_body,
    structured_selector_matches,
    validate_labels,
)
from tests.support.k8s_objects import fleet_nodes, gpu_node, gpu_pod, pdb, write_kubeconfig

__all__ = [
    "FakeApiServer",
    "RecordedRequest",
    "fleet_nodes",
    "gpu_node",
    "gpu_pod",
    "pdb",
    "permission_for",
    "write_kubeconfig",
]

_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: Mapping[str, list[str]]
    body: Any
    content_type: str
    status: int = 0  # what the stand-in answered

    @property
    def permission(self) -> Permission:
        return permission_for(self.method, self.path, self.query)


@dataclass
class _Injected:
    method: str
    path_prefix: str
    status: int = 0
    message: str = ""
    action: Callable[[], None] | None = None


@dataclass
class _State:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pdbs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    config_maps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


class FakeApiServer:
    """The stand-in; use as a context manager or call :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        *,
        nodes: Iterable[Mapping[str, Any]] = (),
        pods: Iterable[Mapping[str, Any]] = (),
        pdbs: Iterable[Mapping[str, Any]] = (),
        config_maps: Iterable[Mapping[str, Any]] = (),
        token: str | None = None,
        rbac: Collection[Permission] | None = None,
    ) -> None:
        """``token``: when set, requests without ``Authorization: Bearer <token>`` get 401. ``rbac``: when
        set, requests needing a permission outside it get 403."""
        self._lock = threading.RLock()
        self._revision = itertools.count(1000)
        self._uids = itertools.count(1)
        self._state = _State()
        self._requests: list[RecordedRequest] = []
        self._injected: list[_Injected] = []
        self._token = token
        self._rbac = frozenset(rbac) if rbac is not None else None
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for node in nodes:
            self.add_node(node)
        for pod in pods:
            self.add_pod(pod)
        for budget in pdbs:
            self.add_pdb(budget)
        for config_map in config_maps:
            self.add_config_map(config_map)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        handler = type("_Handler", (_Handler,), {"fake": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._http is not None, "start the stand-in first"
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- state -----------------------------------------------------------------------------------------------

    def _stamp(self, obj: dict[str, Any]) -> None:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._revision))
        meta.setdefault("uid", f"00000000-0000-4000-8000-{next(self._uids):012d}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")

    def add_node(self, node: Mapping[str, Any]) -> None:
        obj = copy.deepcopy(dict(node))
        obj.update(kind="Node", apiVersion="v1")
        with self._lock:
            self._stamp(obj)
            self._state.nodes[obj["metadata"]["name"]] = obj

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        obj = copy.deepcopy(dict(pod))
        obj.update(kind="Pod", apiVersion="v1")
        obj["metadata"].setdefault("namespace", "default")
        for container in [*obj["spec"].get("initContainers", []), *obj["spec"].get("containers", [])]:
            # Admission defaults a missing request to the limit (always so for extended resources).
            resources = container.setdefault("resources", {})
            requests = resources.setdefault("requests", {})
            for resource, quantity in resources.get("limits", {}).items():
                requests.setdefault(resource, quantity)
        with self._lock:
            self._stamp(obj)
            self._state.pods[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    def add_pdb(self, budget: Mapping[str, Any]) -> None:
        self._add_namespaced(self._state.pdbs, budget, "PodDisruptionBudget", "policy/v1")

    def add_config_map(self, config_map: Mapping[str, Any]) -> None:
        self._add_namespaced(self._state.config_maps, config_map, "ConfigMap", "v1")

    def _add_namespaced(
        self,
        objects: dict[tuple[str, str], dict[str, Any]],
        given: Mapping[str, Any],
        kind: str,
        api_version: str,
    ) -> None:
        """Store a copy of ``given`` under (namespace, name), ``default`` when it names no namespace."""
        obj = copy.deepcopy(dict(given))
        obj.update(kind=kind, apiVersion=api_version)
        obj["metadata"].setdefault("namespace", "default")
        with self._lock:
            self._stamp(obj)
            objects[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    def config_map(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._state.config_maps[(namespace, name)])

    def update_config_map_externally(
        self, namespace: str, name: str, change: Callable[[dict[str, Any]], None]
    ) -> None:
        """Another writer changes the ConfigMap (a person with kubectl): its resourceVersion moves on."""
        with self._lock:
            obj = self._state.config_maps[(namespace, name)]
            change(obj)
            self._stamp(obj)

    def node(self, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._state.nodes[name])

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._state.pods.get((namespace, name))
            return copy.deepcopy(found) if found else None

    def pdb(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._state.pdbs[(namespace, name)])

    def set_node_labels_externally(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Another writer (the MIG manager, a person with kubectl) changes labels: bumps resourceVersion."""
        with self._lock:
            node = self._state.nodes[name]
            merge_patch(node["metadata"].setdefault("labels", {}), dict(labels))
            self._stamp(node)

    def update_node_externally(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Another controller (the GPU Operator, the kubelet) changes the stored node: bumps resourceVersion."""
        with self._lock:
            node = self._state.nodes[name]
            change(node)
            self._stamp(node)

    # -- fault injection and inspection ---------------------------------------------------------------------

    def fail_next(self, method: str, path_prefix: str, status: int, message: str = "") -> None:
        """The next ``method`` request whose path starts with ``path_prefix`` gets ``status`` (once).
        Injections queue up: each matching request consumes the oldest one."""
        text = message or f"injected failure ({status})"
        with self._lock:
            self._injected.append(_Injected(method.upper(), path_prefix, status=status, message=text))

    def before_next(self, method: str, path_prefix: str, action: Callable[[], None]) -> None:
        """Run ``action`` just before handling the next matching request (once): a concurrent writer that
        strikes between the client's read and its write."""
        with self._lock:
            self._injected.append(_Injected(method.upper(), path_prefix, action=action))

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def writes(self) -> list[RecordedRequest]:
        """Every request that could change state (anything but GET)."""
        return [r for r in self.requests if r.method != "GET"]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def _take_injected(self, method: str, path: str) -> _Injected | None:
        """The oldest injection matching this request, removed: each request consumes at most one."""
        with self._lock:
            for item in self._injected:
                if item.method == method and path.startswith(item.path_prefix):
                    self._injected.remove(item)
                    return item
            return None

    # -- request handling (called from the HTTP handler thread) ----------------------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, Any]:
        """Answer one request (``headers`` with lower-case names) and record it."""
        parts = urlsplit(target)
        path, query = parts.path, parse_qs(parts.query, keep_blank_values=True)
        content_type = (headers.get("content-type") or "").split(";")[0].strip()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        status, answer = self._answer(method, path, query, headers, content_type, body)
        with self._lock:
            self._requests.append(RecordedRequest(method, path, query, body, content_type, status))
        return status, answer

    def _answer(
        self,
        method: str,
        path: str,
        query: Mapping[str, list[str]],
        headers: Mapping[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[int, Any]:
        try:
            injected = self._take_injected(method, path)
            if injected is not None and injected.action is not None:
                injected.action()
            if injected is not None and injected.status:
                raise ApiError(injected.status, injected.message)
            if self._token is not None and headers.get("authorization") != f"Bearer {self._token}":
                raise ApiError(401, "Unauthorized")
            if self._rbac is not None:
                group, resource, verb = permission_for(method, path, query)
                if (group, resource, verb) not in self._rbac:
                    raise ApiError(
                        403,
                        f'{resource} is forbidden: User "system:serviceaccount:slicewise:slicewise" cannot '
                        f'{verb} resource "{resource}" in API group "{group}"',
                    )
            with self._lock:
                return self._route(method, path, query, content_type, body)
        except ApiError as exc:
            return exc.code, status_body(exc.code, exc.message, exc.details)

    def _route(
        self, method: str, path: str, query: Mapping[str, list[str]], content_type: str, body: Any
    ) -> tuple[int, Any]:
        routes: list[tuple[str, str, Callable[..., tuple[int, Any]]]] = [
            ("GET", r"/api/v1/nodes", lambda: self._list_nodes(query)),
            ("GET", r"/api/v1/nodes/(?P<name>[^/]+)", self._get_node),
            (
                "PATCH",
                r"/api/v1/nodes/(?P<name>[^/]+)",
                lambda name: self._patch_node(name, content_type, body),
            ),
            ("GET", r"/api/v1/pods", lambda: self._list_pods(query)),
            ("GET", r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets", self._list_pdbs),
            ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/configmaps/(?P<name>[^/]+)", self._get_config_map),
            (
                "PATCH",
                r"/api/v1/namespaces/(?P<ns>[^/]+)/configmaps/(?P<name>[^/]+)",
                lambda ns, name: self._patch_config_map(ns, name, content_type, body),
            ),
            (
                "POST",
                r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/eviction",
                lambda ns, name: self._evict(ns, name, body),
            ),
        ]
        path_known = False
        for route_method, pattern, action in routes:
            found = re.fullmatch(pattern, path)
            if found is None:
                continue
            path_known = True
            if route_method == method:
                return action(**found.groupdict())
        if path_known:
            raise ApiError(405, f"the server does not allow this method on the requested resource ({method})")
        raise ApiError(404, "the server could not find the requested resource")

    def _list(self, kind: str, api_version: str, items: Iterable[dict[str, Any]]) -> tuple[int, Any]:
        bare = []
        for item in items:
            obj = copy.deepcopy(item)
            obj.pop("kind", None)  # list items carry no kind/apiVersion, as in a real List
            obj.pop("apiVersion", None)
            bare.append(obj)
        revision = str(max((int(o["metadata"]["resourceVersion"]) for o in self._all_objects()), default=1))
        return 200, {
            "kind": kind,
            "apiVersion": api_version,
            "metadata": {"resourceVersion": revision},
            "items": bare,
        }

    def _all_objects(self) -> Iterator[dict[str, Any]]:
        yield from self._state.nodes.values()
        yield from self._state.pods.values()
        yield from self._state.pdbs.values()
        yield from self._state.config_maps.values()

    def _list_nodes(self, query: Mapping[str, list[str]]) -> tuple[int, Any]:
        match = label_selector(query.get("labelSelector", [""])[0])
        nodes = [n for _, n in sorted(self._state.nodes.items()) if match(n["metadata"].get("labels") or {})]
        return self._list("NodeList", "v1", nodes)

    def _get_node(self, name: str) -> tuple[int, Any]:
        if name not in self._state.nodes:
            raise ApiError(404, f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
        return 200, copy.deepcopy(self._state.nodes[name])

    def _patch_node(self, name: str, content_type: str, patch: Any) -> tuple[int, Any]:
        if name not in self._state.nodes:
            _check_patch(content_type, patch)
            raise ApiError(404, f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
        updated = self._patched("nodes", name, self._state.nodes[name], content_type, patch)
        validate_labels(name, updated["metadata"].get("labels") or {})
        return self._store(self._state.nodes, name, updated)

    def _get_config_map(self, ns: str, name: str) -> tuple[int, Any]:
        if (ns, name) not in self._state.config_maps:
            raise ApiError(404, f'configmaps "{name}" not found', {"name": name, "kind": "configmaps"})
        return 200, copy.deepcopy(self._state.config_maps[(ns, name)])

    def _patch_config_map(self, ns: str, name: str, content_type: str, patch: Any) -> tuple[int, Any]:
        if (ns, name) not in self._state.config_maps:
            _check_patch(content_type, patch)
            raise ApiError(404, f'configmaps "{name}" not found', {"name": name, "kind": "configmaps"})
        updated = self._patched("configmaps", name, self._state.config_maps[(ns, name)], content_type, patch)
        return self._store(self._state.config_maps, (ns, name), updated)

    def _store(
        self, objects: dict[Any, dict[str, Any]], key: Any, updated: dict[str, Any]
    ) -> tuple[int, Any]:
        """Keep ``updated``; a write that changes something bumps the resourceVersion, a no-op does not."""
        if updated != objects[key]:
            self._stamp(updated)
            objects[key] = updated
        return 200, copy.deepcopy(objects[key])

    def _patched(
        self, kind: str, name: str, stored: dict[str, Any], content_type: str, patch: Any
    ) -> dict[str, Any]:
        """``stored`` with ``patch`` applied; a ``metadata.resourceVersion`` in it is a precondition (409)."""
        _check_patch(content_type, patch)
        precondition = (patch.get("metadata") or {}).get("resourceVersion")
        if precondition is not None and precondition != stored["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {kind} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": name, "kind": kind},
            )
        updated = copy.deepcopy(stored)
        merge_patch(updated, copy.deepcopy(patch))
        updated["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        if updated["metadata"].get("name") != name:
            raise ApiError(
                422, f'{stored["kind"]} "{name}" is invalid: metadata.name: Invalid value: field is immutable'
            )
        return updated

    def _list_pods(self, query: Mapping[str, list[str]]) -> tuple[int, Any]:
        by_field = field_selector(query.get("fieldSelector", [""])[0])
        by_label = label_selector(query.get("labelSelector", [""])[0])
        pods = [
            p
            for _, p in sorted(self._state.pods.items())
            if by_field(p) and by_label(p["metadata"].get("labels") or {})
        ]
        return self._list("PodList", "v1", pods)

    def _list_pdbs(self, ns: str) -> tuple[int, Any]:
        budgets = [b for (namespace, _), b in sorted(self._state.pdbs.items()) if namespace == ns]
        return self._list("PodDisruptionBudgetList", "policy/v1", budgets)

    def _evict(self, ns: str, name: str, eviction: Any) -> tuple[int, Any]:
        if not isinstance(eviction, dict) or eviction.get("kind") != "Eviction":
            raise ApiError(400, "the body of the request is not an Eviction")
        if eviction.get("apiVersion") not in ("policy/v1", "policy/v1beta1"):
            raise ApiError(
                400, f'no kind "Eviction" is registered for version "{eviction.get("apiVersion")}"'
            )
        meta = eviction.get("metadata") or {}
        if meta.get("name") != name:
            raise ApiError(400, "name in URL does not match name in Eviction object")
        if meta.get("namespace", ns) != ns:
            raise ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        pod = self._state.pods.get((ns, name))
        if pod is None:
            raise ApiError(404, f'pods "{name}" not found', {"name": name, "kind": "pods"})
        # registry/core/pod/storage/eviction.go: pending or finished pods are not guarded by budgets.
        if pod["status"].get("phase") not in ("Pending", "Succeeded", "Failed"):
            labels = pod["metadata"].get("labels") or {}
            budgets = [
                b
                for (namespace, _), b in sorted(self._state.pdbs.items())
                if namespace == ns and structured_selector_matches(b["spec"].get("selector"), labels)
            ]
            if len(budgets) > 1:
                raise ApiError(
                    500,
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
                    "support.",
                )
            if budgets:
                budget = budgets[0]
                status = budget.setdefault("status", {})
                if status.get("disruptionsAllowed", 0) <= 0:
                    cause = (
                        f"The disruption budget {budget['metadata']['name']} needs "
                        f"{status.get('desiredHealthy', 0)} healthy pods and has "
                        f"{status.get('currentHealthy', 0)} currently"
                    )
                    raise ApiError(
                        429,
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
                    )
                status["disruptionsAllowed"] -= 1
                self._stamp(budget)
        del self._state.pods[(ns, name)]
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _check_patch(content_type: str, patch: Any) -> None:
    """What the API server refuses before it looks the object up: an unknown patch type, a body that is not an
    object, and (the stand-in's limit) a strategic merge of lists."""
    if content_type not in _PATCH_TYPES:
        raise ApiError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
            "application/strategic-merge-patch+json",
        )
    if not isinstance(patch, dict):
        raise ApiError(400, "error decoding patch: the patch must be a JSON object")
    if content_type.startswith("application/strategic") and has_list(patch):
        raise ApiError(400, "stand-in: strategic merge of lists is not implemented; send a merge patch")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status, answer = self.fake.handle(
            self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, raw
        )
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if status == 429:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the request log is the record
        pass
