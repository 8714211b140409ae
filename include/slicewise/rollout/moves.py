"""Carry the plan's re-homing moves to the cluster (planning.rehome): evict each listed fractional pod from its
whole GPU, so its controller re-creates it and the scheduler places it on a free MPS tenant.

A move changes no node: it is one call to the Eviction API (PodDisruptionBudgets respected), as the cluster
autoscaler or the descheduler make. So it needs no waves, no analysis and no rollback (an eviction cannot be taken
back, and the pod's controller brings it back at once). Each move is checked against the cluster as it is now,
not as the plan saw it: the pod must still run on that node with one whole GPU, still be evictable, and one of
the plan's MPS nodes must still advertise a tenant nobody requests; otherwise it is skipped, with the reason. A
crash between two moves leaves some pods moved and others not, which the next run's plan sees and lists anew.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.cluster.base import ClusterBackend, EvictionBlocked, GpuNode, GpuPod, NodeNotFound
from slicewise.planning.types import FleetPlan, PodMove

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Moved:
    evicted: tuple[str, ...]  # namespace/pod
    skipped: tuple[str, ...]  # namespace/pod: why

    def describe(self) -> str:
        return f"re-homed {len(self.evicted)} fractional pods ({', '.join(self.evicted) or '-'})" + (
            f"; skipped {len(self.skipped)}: {'; '.join(self.skipped)}" if self.skipped else ""
        )


def move_pods(backend: ClusterBackend, plan: FleetPlan) -> Moved:
    """Evict the plan's moves that still hold; say why of the others. Each node named is read once, before the
    first eviction."""
    names = sorted({move.node for move in plan.moves} | {node for move in plan.moves for node in move.to})
    seen = {name: _read(backend, name) for name in names}
    free = {name: _free_tenants(*seen[name]) for name in names}  # counted down as pods move
    evicted: list[str] = []
    skipped: list[str] = []
    for move in plan.moves:
        name = f"{move.namespace}/{move.pod}"
        why = _stale(move, seen, free)
        if why is None:
            try:
                backend.evict(move.namespace, move.pod)
            except EvictionBlocked as exc:
                why = str(exc)
        if why is None:
            receiver = next(node for node in move.to if free[node] > 0)
            free[receiver] -= 1
            evicted.append(name)
        else:
            skipped.append(f"{name}: {why}")
    moved = Moved(tuple(evicted), tuple(skipped))
    if plan.moves:
        log.info("%s", moved.describe())
    return moved


Seen = tuple[GpuNode | None, list[GpuPod]]  # a node as read (None: gone) and its GPU pods


def _read(backend: ClusterBackend, name: str) -> Seen:
    try:
        return backend.get_node(name), backend.list_gpu_pods(name)
    except NodeNotFound:
        return None, []


def _stale(move: PodMove, seen: Mapping[str, Seen], free: Mapping[str, int]) -> str | None:
    """Why the move no longer holds, or None."""
    node, pods = seen[move.node]
    pod = next((p for p in pods if (p.namespace, p.name) == (move.namespace, move.pod)), None)
    if node is None or pod is None:
        return f"no longer on {move.node}"
    # More nvidia.com/gpu advertised than GPUs: the node shares them (MPS or time-slicing) since the plan.
    if dict(pod.requests) != {GPU_RESOURCE: 1} or node.allocatable.get(GPU_RESOURCE, 0) > node.gpu_count:
        return "no longer on one whole GPU"
    if not pod.evictable:
        return "not evictable now: " + ("; ".join(pod.blockers) or "no reason given")
    if not any(free[receiver] > 0 for receiver in move.to):
        return f"no tenant free on {'|'.join(move.to)} any more"
    return None


def _free_tenants(node: GpuNode | None, pods: list[GpuPod]) -> int:
    """Tenants the node advertises (``nvidia.com/gpu`` allocatable: GPUs x replicas under MPS) that no pod
    requests; 0 for a node gone."""
    if node is None:
        return 0
    used = sum(p.requests.get(GPU_RESOURCE, 0) for p in pods)
    return max(0, node.allocatable.get(GPU_RESOURCE, 0) - used)
