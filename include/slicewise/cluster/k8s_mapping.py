"""Pure translation of Kubernetes API objects into Slicewise's view: nodes, GPU pods, evictability.

No I/O: the functions take ``kubernetes.client`` model objects (as the API client returns them) and give back
:mod:`slicewise.cluster.base` data, so the rules are tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import InvalidOperation
from typing import Any

from slicewise import schema
from slicewise.cluster.base import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    EVICTABLE_ANNOTATION,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_SHARE_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    GpuNode,
    GpuPod,
    Taint,
    is_gpu_resource,
)


def quantity_to_int(value: object) -> int | None:
    """A Kubernetes quantity ("7", "1k", "2Ki") as a whole number; None when it is not one.

    GPU resources are counts, so fractional or malformed quantities are treated as unreadable, not rounded.
    """
    from kubernetes.utils import parse_quantity

    try:
        parsed = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return None
    return int(parsed) if parsed == parsed.to_integral_value() else None


def _label_int(value: str) -> int:
    """A count label such as ``nvidia.com/gpu.count``; 0 when absent or not a non-negative integer."""
    try:
        count = int(value)
    except ValueError:
        return 0
    return max(count, 0)


def node_from_api(node: Any) -> GpuNode:
    """A ``V1Node`` as a :class:`GpuNode`; only GPU resources of ``status.allocatable`` are kept."""
    meta = node.metadata
    labels: dict[str, str] = dict(meta.labels or {})
    allocatable: dict[str, int] = {}
    for resource, quantity in ((node.status and node.status.allocatable) or {}).items():
        count = quantity_to_int(quantity)
        if is_gpu_resource(resource) and count is not None:
            allocatable[resource] = count
    gpu_count = _label_int(labels.get(GPU_COUNT_LABEL, ""))
    return GpuNode(
        name=meta.name,
        gpu_product=labels.get(GPU_PRODUCT_LABEL, ""),
        gpu_count=gpu_count,
        mig_config=labels.get(MIG_CONFIG_LABEL, ""),
        mig_config_state=labels.get(MIG_STATE_LABEL, ""),
        device_plugin_config=labels.get(DEVICE_PLUGIN_CONFIG_LABEL, ""),
        allocatable=dict(sorted(allocatable.items())),
        unschedulable=bool(node.spec and node.spec.unschedulable),
        labels=labels,
        annotations=dict(meta.annotations or {}),
        resource_version=meta.resource_version or "",
        taints=tuple(
            Taint(t.key, t.effect, t.value or "") for t in ((node.spec and node.spec.taints) or ()) if t.key
        ),
    )


def _container_gpu_requests(container: Any) -> dict[str, int]:
    """GPU resources one container asks for. Extended resources are usually given only as limits, and the
    API server then defaults the request to the limit, so a limit stands in for a missing request."""
    resources = container.resources
    requests = dict((resources and resources.requests) or {})
    limits = dict((resources and resources.limits) or {})
    wanted: dict[str, int] = {}
    for resource in set(requests) | set(limits):
        if not is_gpu_resource(resource):
            continue
        count = quantity_to_int(requests.get(resource, limits.get(resource)))
        if count:
            wanted[resource] = count
    return wanted


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, count in more.items():
        total[resource] = total.get(resource, 0) + count


def pod_gpu_requests(pod: Any) -> dict[str, int]:
    """The pod's effective GPU request, as the scheduler computes it.

    Regular containers run together, so their requests add up; classic init containers run one at a time
    before them, so each counts alone (the maximum wins); sidecar init containers (``restartPolicy: Always``)
    keep running, so they add to the regular containers and to every init container started after them.
    """
    spec = pod.spec
    running: dict[str, int] = {}
    for container in spec.containers or []:
        _add(running, _container_gpu_requests(container))
    sidecars: dict[str, int] = {}
    peak_init: dict[str, int] = {}
    for container in spec.init_containers or []:
        wanted = _container_gpu_requests(container)
        if container.restart_policy == "Always":
            _add(sidecars, wanted)
            _add(running, wanted)
        step = dict(sidecars)
        if container.restart_policy != "Always":
            _add(step, wanted)
        for resource, count in step.items():
            peak_init[resource] = max(peak_init.get(resource, 0), count)
    effective = {r: max(running.get(r, 0), peak_init.get(r, 0)) for r in set(running) | set(peak_init)}
    return {r: c for r, c in sorted(effective.items()) if c > 0}


def controller_owner(pod: Any) -> tuple[str, str]:
    """(kind, name) of the owner reference marked ``controller: true``; ("", "") for a bare pod."""
    for ref in pod.metadata.owner_references or []:
        if ref.controller:
            return ref.kind, ref.name
    return "", ""


def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """Whether a ``V1LabelSelector`` selects an object with ``labels``.

    Kubernetes semantics: a null selector selects nothing; an empty one (no matchLabels, no
    matchExpressions) selects everything, which is how a policy/v1 PodDisruptionBudget covers a namespace.
    An operator this code does not know selects nothing, so an unreadable PDB never lets a pod through
    unnoticed: the eviction itself would still be refused by the API server.
    """
    if selector is None:
        return False
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions or []:
        values = set(requirement.values or [])
        present = requirement.key in labels
        operator = requirement.operator
        if operator == "In":
            ok = present and labels[requirement.key] in values
        elif operator == "NotIn":
            ok = not present or labels[requirement.key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            return False
        if not ok:
            return False
    return True


#: Prefix of the one blocker that can clear by itself (a budget allowing no disruption *now*).
_BUDGET_BLOCKER = "PodDisruptionBudget "


def eviction_blockers(pod: Any, owner_kind: str, pdbs: Iterable[Any]) -> tuple[str, ...]:
    """Every reason Slicewise may not evict ``pod`` now, in words; empty when it may.

    ``pdbs`` are the ``V1PodDisruptionBudget`` objects of the pod's namespace.
    """
    meta = pod.metadata
    blockers: list[str] = []
    if (meta.annotations or {}).get(EVICTABLE_ANNOTATION) != "true":
        blockers.append(f"no {EVICTABLE_ANNOTATION}=true annotation")
    if not owner_kind:
        # Nothing would recreate it: evicting a bare pod deletes the workload.
        blockers.append("bare pod (no controller)")
    elif owner_kind == "DaemonSet":
        # The DaemonSet controller would put it straight back on the same node.
        blockers.append("DaemonSet pod")
    labels = meta.labels or {}
    covering = [pdb for pdb in pdbs if selector_matches(pdb.spec and pdb.spec.selector, labels)]
    for pdb in covering:
        allowed = (pdb.status and pdb.status.disruptions_allowed) or 0
        if allowed <= 0:
            blockers.append(
                f"{_BUDGET_BLOCKER}{pdb.metadata.namespace}/{pdb.metadata.name} allows 0 disruptions"
            )
    if len(covering) > 1:
        # The Eviction API answers 500 for such pods ("more than one PodDisruptionBudget").
        names = ", ".join(sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in covering))
        blockers.append(f"more than one PodDisruptionBudget selects it ({names}); the Eviction API refuses")
    return tuple(blockers)


def gpu_pod_from_api(pod: Any, pdbs: Sequence[Any]) -> GpuPod | None:
    """A ``V1Pod`` as a :class:`GpuPod`, or None when it requests no GPU resource."""
    requests = pod_gpu_requests(pod)
    if not requests:
        return None
    owner_kind, owner_name = controller_owner(pod)
    blockers = eviction_blockers(pod, owner_kind, pdbs)
    return GpuPod(
        namespace=pod.metadata.namespace or "",
        name=pod.metadata.name,
        node=(pod.spec and pod.spec.node_name) or "",
        phase=(pod.status and pod.status.phase) or "Unknown",
        requests=requests,
        owner_kind=owner_kind,
        owner_name=owner_name,
        evictable=not blockers,
        blockers=blockers,
        budget_blocked=bool(blockers) and all(b.startswith(_BUDGET_BLOCKER) for b in blockers),
        share=declared_share(pod.metadata.annotations or {}),
        node_selector=node_selector(pod),
        started_at=pod.status.start_time if pod.status else None,
    )


def node_selector(pod: Any) -> dict[str, tuple[str, ...]]:
    """Where the pod may run by node labels: its ``spec.nodeSelector``, and the ``In`` expressions of its required
    node affinity when that has a single term (terms are alternatives: with several, none of them binds alone,
    so they are left out and a move may pick a node the scheduler refuses; the pod then waits, as it would after
    any eviction)."""
    spec = pod.spec
    out: dict[str, tuple[str, ...]] = {
        key: (value,) for key, value in sorted(((spec and spec.node_selector) or {}).items())
    }
    affinity = spec and spec.affinity and spec.affinity.node_affinity
    required = affinity and affinity.required_during_scheduling_ignored_during_execution
    terms = (required and required.node_selector_terms) or []
    if len(terms) == 1:
        for expression in terms[0].match_expressions or []:
            if expression.operator == "In":
                allowed = tuple(sorted(expression.values or []))
                if expression.key in out:
                    allowed = tuple(v for v in out[expression.key] if v in allowed)
                out[expression.key] = allowed
    return out


def declared_share(annotations: Mapping[str, str]) -> float | None:
    """The share of a GPU a pod declares (``slicewise.io/gpu-share``, in (0, 1]); None when absent or not a share
    (a malformed value is ignored: the pod keeps to the resources it requests)."""
    return schema.parse_gpu_share(annotations.get(GPU_SHARE_ANNOTATION))


def labels_differing(labels: Mapping[str, str], expected: Mapping[str, str | None]) -> list[str]:
    """Descriptions of every ``expected`` label the node does not carry as expected (None = absent)."""
    found = []
    for key, want in sorted(expected.items()):
        have = labels.get(key)
        if have != want:
            found.append(f"{key}: expected {_shown(want)}, found {_shown(have)}")
    return found


def _shown(value: str | None) -> str:
    return "absent" if value is None else repr(value)
