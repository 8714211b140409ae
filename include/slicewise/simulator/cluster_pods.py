"""The simulated cluster's GPU pods: which run on a node at a time, and which of them were evicted.

Pods are not stored: they are the simulator's own, computed from the load model at a time on the layouts the
state says are applied, so their names are those the exporter's kube-state-metrics series carry. The state
only adds what the load model cannot know: evicted pods, and that no new pod lands on a cordoned node or on
one whose GPUs are being reconfigured (the scheduler and the paused device plugin would not let it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from slicewise import schema
from slicewise.catalog import resource_for_profile
from slicewise.cluster.base import EVICTABLE_ANNOTATION, EvictionBlocked, GpuPod
from slicewise.simulator import mig_manager, noise
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.frames import pod_names
from slicewise.simulator.load import slot_load
from slicewise.simulator.mig_manager import NodeState

#: How long evictions are remembered when the fleet has no load classes.
_DEFAULT_EVICTION_MEMORY_S = 86_400


@dataclass(frozen=True)
class SimulatedPod:
    """One pod the load model runs; ``slot`` names it whatever name the layout gives it."""

    namespace: str
    name: str
    node: str
    workload: str
    resource: str  # the real extended resource name: nvidia.com/gpu or nvidia.com/mig-<profile>
    started: float  # start of the pod's epoch: when it was scheduled
    slot: str  # the slot and epoch: which pod this is, whatever name it is given

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def running_pods(fleet: Fleet, at: float) -> list[SimulatedPod]:
    """Every pod the load model runs at ``at``, with the names frames.demand_rows gives them."""
    layout = fleet.layout
    t = int(at)
    load = slot_load(fleet, np.array([t], dtype=np.int64))
    slots = np.flatnonzero(load.present[0])
    if not len(slots):
        return []
    epoch = load.epoch[0, slots]
    workload = layout.slot_workload[slots]
    names = pod_names(fleet, workload, layout.slot_local[slots], epoch)
    # load.slot_load: a slot's epochs are shifted by (key mod lifetime), so epoch e starts at e*L - offset.
    lifetimes = np.array([fleet.classes[c].lifetime_s for c in fleet.class_names], dtype=np.int64)
    lifetime = lifetimes[layout.slot_class[slots]]
    started = epoch * lifetime - layout.slot_key[slots] % lifetime
    series = layout.slot_series[slots]
    slot_keys = layout.slot_key[slots].tolist()
    pods = []
    for i, slot_series in enumerate(series.tolist()):
        wl = fleet.workloads[fleet.workload_names[int(workload[i])]]
        profile = layout.series_profile[slot_series]
        pods.append(
            SimulatedPod(
                namespace=wl.namespace,
                name=names[i],
                node=fleet.nodes[int(layout.series_node[slot_series])].name,
                workload=wl.name,
                resource=resource_for_profile(profile) if profile else "nvidia.com/gpu",
                started=float(started[i]),
                slot=f"{slot_keys[i]}@{int(epoch[i])}",
            )
        )
    return pods


def visible(pod: SimulatedPod, node: NodeState) -> bool:
    """Whether the pod is on the node as the API server would list it."""
    # Evictions are remembered by slot and epoch, not by name: pod names number a workload's slots across
    # the fleet, so another node's new layout renames pods here (layout.slot_local), yet they stay evicted.
    if pod.slot in node["evicted"]:
        return False
    # No new pod is scheduled onto a cordoned node, nor onto GPUs the MIG manager is reconfiguring (the
    # device plugin is paused). A pod arrives when its slot turns over, or when its slot appeared (new MIG
    # devices or MPS tenants: pending pods are scheduled onto them at once); one that would have arrived
    # after the node closed is not here.
    closed = [t for t in (node["cordoned_at"], mig_manager.pending_since(node)) if t is not None]
    arrived = max(pod.started, node["applied"].get("since", 0.0))
    return not closed or arrived < min(closed)


def listed_on(pods: Iterable[SimulatedPod], name: str, node: NodeState) -> list[SimulatedPod]:
    """Those of ``pods`` that the API server lists on node ``name`` (whose state is ``node``), in order."""
    return [p for p in pods if p.node == name and visible(p, node)]


# -- evictions ------------------------------------------------------------------------------------------------
def eviction_memory_s(fleet: Fleet) -> float:
    """How long an eviction must be remembered: until the pod's epoch is over (its slot then holds a new pod)."""
    lifetimes = [c.lifetime_s for c in fleet.classes.values()]
    return float(max(lifetimes, default=_DEFAULT_EVICTION_MEMORY_S))


def forget_evictions(node: NodeState, before: float) -> None:
    """Drop the evictions of ``node`` made before ``before``: those pods' slots have turned over since."""
    node["evicted"] = {pod: t for pod, t in node["evicted"].items() if t >= before}


def record_eviction(
    pods: Iterable[SimulatedPod],
    nodes: Mapping[str, NodeState],
    namespace: str,
    name: str,
    workloads: Mapping[str, Mapping[str, Any]],
    now: float,
) -> None:
    """Record in ``nodes`` that the listed pod ``namespace/name`` of ``pods`` was evicted at ``now``.

    EvictionBlocked, nothing recorded, when its workload's config (in ``workloads``) says its PDB blocks; a pod
    that is not listed counts as already gone.
    """
    for candidate in pods:
        node = nodes[candidate.node]
        if (candidate.namespace, candidate.name) != (namespace, name) or not visible(candidate, node):
            continue
        if workloads.get(candidate.workload, {}).get("pdb_blocks", False):
            raise EvictionBlocked(
                f"eviction of pod {namespace}/{name} refused: Cannot evict pod as it would violate the "
                "pod's disruption budget."
            )
        node["evicted"][candidate.slot] = now


# -- the API view -----------------------------------------------------------------------------------------------
def gpu_pod(pod: SimulatedPod, config: Mapping[str, Any]) -> GpuPod:
    """``pod`` as the backend reports it; ``config`` is its workload's entry of the simulator config, which
    says whether it is evictable, who owns it and whether a PDB blocks it."""
    owner_kind, owner_name = _owner(pod.workload, str(config.get("owner_kind", "")))
    blockers = []
    if not config.get("evictable", False):
        blockers.append(f"no {EVICTABLE_ANNOTATION}=true annotation")
    if not owner_kind:
        blockers.append("bare pod (no controller)")
    budget = f"PodDisruptionBudget {pod.namespace}/{pod.workload} allows 0 disruptions"
    if config.get("pdb_blocks", False):
        blockers.append(budget)
    return GpuPod(
        namespace=pod.namespace,
        name=pod.name,
        node=pod.node,
        phase="Running",
        requests={pod.resource: 1},
        owner_kind=owner_kind,
        owner_name=owner_name,
        evictable=not blockers,
        blockers=tuple(blockers),
        budget_blocked=blockers == [budget] if config.get("pdb_blocks", False) else False,
        share=schema.parse_gpu_share(str(config["gpu_share"])) if "gpu_share" in config else None,
        # the workload's nodeSelector pins, as kube-state-metrics shows them for its pending pods
        node_selector={
            label: (str(config[form]),)
            for form, label in schema.SELECTOR_NODE_LABELS.items()
            if config.get(form)
        },
        started_at=datetime.fromtimestamp(pod.started, tz=UTC),
    )


def _owner(workload: str, kind: str) -> tuple[str, str]:
    """The pod's controller owner as Kubernetes reports it: a Deployment's pods belong to a ReplicaSet."""
    if kind == "Deployment":
        return "ReplicaSet", f"{workload}-{noise.stable_hex('replicaset/' + workload, 10)}"
    return kind, workload if kind else ""
