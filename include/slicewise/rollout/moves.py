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
from dataclasses import dataclass

from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.cluster.base import ClusterBackend, EvictionBlocked, NodeNotFound
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
    """Evict the plan's moves that still hold; say why of the others."""
    evicted: list[str] = []
    skipped: list[str] = []
    free: dict[str, int] = {}  # receivers' free tenants, read once and counted down
    for move in plan.moves:
        name = f"{move.namespace}/{move.pod}"
        why = _stale(backend, move, free)
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


def _stale(backend: ClusterBackend, move: PodMove, free: dict[str, int]) -> str | None:
    """Why the move no longer holds, or None."""
    pod = next(
        (p for p in backend.list_gpu_pods(move.node) if (p.namespace, p.name) == (move.namespace, move.pod)),
        None,
    )
    if pod is None:
        return f"no longer on {move.node}"
    if dict(pod.requests) != {GPU_RESOURCE: 1} or _shares_gpus(backend, move.node):
        return "no longer on one whole GPU"
    if not pod.evictable:
        return "not evictable now: " + ("; ".join(pod.blockers) or "no reason given")
    for node in move.to:
        if node not in free:
            free[node] = _free_tenants(backend, node)
    if not any(free[node] > 0 for node in move.to):
        return f"no tenant free on {'|'.join(move.to)} any more"
    return None


def _shares_gpus(backend: ClusterBackend, node: str) -> bool:
    """Whether the node now advertises more ``nvidia.com/gpu`` than it has GPUs (MPS or time-slicing replicas)."""
    try:
        found = backend.get_node(node)
    except NodeNotFound:
        return False
    return found.allocatable.get(GPU_RESOURCE, 0) > found.gpu_count


def _free_tenants(backend: ClusterBackend, node: str) -> int:
    """Tenants the node advertises (``nvidia.com/gpu`` allocatable: GPUs x replicas under MPS) that no pod
    requests; 0 for a node gone."""
    try:
        advertised = backend.get_node(node).allocatable.get(GPU_RESOURCE, 0)
    except NodeNotFound:
        return 0
    used = sum(p.requests.get(GPU_RESOURCE, 0) for p in backend.list_gpu_pods(node))
    return max(0, advertised - used)
