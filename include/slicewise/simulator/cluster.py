"""The ``simulated`` cluster backend: the simulated fleet as Kubernetes nodes and GPU pods, with a GPU Operator.

Node labels, annotations, cordons, evictions and the MIG-manager / device-plugin emulation
(:mod:`slicewise.simulator.mig_manager`) live in one JSON state file that several processes share
(:mod:`slicewise.simulator.cluster_state`). The emulation is advanced on every access, at ``clock()``.
Pods are the load model's, computed at ``clock()`` on the applied layouts
(:mod:`slicewise.simulator.cluster_pods`). This module answers as the API server would: node look-ups and
views, label and annotation patches, cordons, evictions.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from slicewise.catalog import Catalog, load_catalog
from slicewise.cluster.base import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    HOLD_ANNOTATION,
    MANAGED_LABEL,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    ClusterError,
    ConfigMap,
    ConfigMapChanged,
    CordonedByOthers,
    GpuNode,
    GpuPod,
    Hold,
    LabelsChanged,
    NodeNotFound,
    Taint,
)
from slicewise.simulator import mig_manager
from slicewise.simulator.cluster_pods import (
    SimulatedPod,
    eviction_memory_s,
    forget_evictions,
    gpu_pod,
    listed_on,
    record_eviction,
    running_pods,
)
from slicewise.simulator.cluster_state import (
    STATE_VERSION,
    AppliedLayouts,
    StateFile,
    applied_layouts,
    bump_changed,
    checked_state,
    config_map_state,
    config_map_view,
    file_key,
    fingerprints,
    initial_state,
    next_due,
)
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.mig_manager import NodeState

# What moved to simulated_state / simulated_pods stays importable from here: the exporter and tests use it.
__all__ = [
    "DEFAULT_RECONFIGURE_S",
    "STATE_VERSION",
    "AppliedLayouts",
    "NodeStatus",
    "SimulatedCluster",
    "StateFile",
    "applied_layouts",
    "file_key",
    "next_due",
]

T = TypeVar("T")
DEFAULT_RECONFIGURE_S = 20.0
#: The name tests/unit/test_cluster_simulated.py imports the pod model by (it lived here before).
_running_pods = running_pods

# Kubernetes label/annotation key and label value syntax (apimachinery validation): the API server answers 422.
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")


# -- the backend ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeStatus:
    """One node as ``slicewise simulate cluster show`` prints it."""

    node: GpuNode
    model: str
    running_pods: int
    conditions: tuple[str, ...]


class SimulatedCluster:
    """The simulated fleet behind :class:`slicewise.cluster.base.ClusterBackend`. Build it with :meth:`open`."""

    name = "simulated"

    def __init__(
        self,
        state: StateFile,
        fleet: Fleet,
        clock: Callable[[], float],
        reconfigure_s: float,
        catalog: Catalog,
        pickup_s: float = 0.0,
    ) -> None:
        self._state = state
        self.fleet = fleet
        self.clock = clock
        self.reconfigure_s = reconfigure_s
        self.pickup_s = pickup_s
        self._catalog = catalog
        self._workload_config: Mapping[str, Mapping[str, Any]] = fleet.config.get("workloads", {})
        self._eviction_memory_s = eviction_memory_s(fleet)
        self._fleets: dict[tuple[Any, ...], Fleet] = {}

    @classmethod
    def open(
        cls,
        state_path: Path,
        *,
        fleet: Fleet | None = None,
        clock: Callable[[], float] = time.time,
        reconfigure_s: float | None = None,
        pickup_s: float = 0.0,
        reset: bool = False,
    ) -> SimulatedCluster:
        """The cluster kept in ``state_path``, initialised from ``fleet`` (default ``Fleet.default()``) when the
        file is missing, or whatever it holds with ``reset``. ``reconfigure_s`` defaults to the fleet config's
        ``cluster.reconfigure_s`` (20 s); ``pickup_s``: how long the MIG manager takes to notice a changed
        ``nvidia.com/mig.config`` (its state label stays stale meanwhile). Raises ClusterError when the file
        holds another fleet's nodes."""
        fleet = fleet if fleet is not None else Fleet.default()
        if reconfigure_s is None:
            reconfigure_s = float(
                (fleet.config.get("cluster") or {}).get("reconfigure_s", DEFAULT_RECONFIGURE_S)
            )
        if reconfigure_s < 0:
            raise ValueError(f"reconfigure_s must not be negative, got {reconfigure_s}")
        cluster = cls(StateFile(state_path), fleet, clock, float(reconfigure_s), load_catalog(), pickup_s)
        if reset:
            cluster.reset()
        cluster.refresh()
        return cluster

    @property
    def state_path(self) -> Path:
        return self._state.path

    # -- ClusterBackend -----------------------------------------------------------------------------------------
    def list_nodes(self) -> list[GpuNode]:
        """Managed GPU nodes, sorted by name."""
        return self._transact(
            lambda state, now: (
                lambda: [
                    _node_view(name, node) for name, node in sorted(state["nodes"].items()) if _managed(node)
                ]
            )
        )

    def get_node(self, name: str) -> GpuNode:
        """One managed node; NodeNotFound for unknown or unmanaged names."""
        return self._transact(lambda state, now: _view_of(state, name))

    def list_gpu_pods(self, node: str) -> list[GpuPod]:
        """The pods running on ``node`` at ``clock()``, sorted by namespace and name."""

        def op(state: dict[str, Any], now: float) -> Callable[[], list[GpuPod]]:
            pods = listed_on(self._pods_at(state, now), node, _node(state, node))
            views = (gpu_pod(p, self._workload_config.get(p.workload, {})) for p in pods)
            result = sorted(views, key=lambda p: (p.namespace, p.name))
            return lambda: result

        return self._transact(op)

    def set_labels(
        self, node: str, changes: Mapping[str, str | None], *, expected: Mapping[str, str | None]
    ) -> GpuNode:
        """Set or remove labels if every ``expected`` label still has its value; else LabelsChanged, nothing
        written. The MIG manager and device plugin react in the same step; the node returned is as written,
        before their reaction (as the API server answers a patch)."""
        _check_keys(changes, label_values=True)

        def op(state: dict[str, Any], now: float) -> Callable[[], GpuNode]:
            found = _node(state, node)
            differing = [
                f"{key}: expected {_shown(want)}, found {_shown(found['labels'].get(key))}"
                for key, want in sorted(expected.items())
                if found["labels"].get(key) != want
            ]
            if differing:
                raise LabelsChanged(f"node {node}: " + "; ".join(differing))
            _merge(found["labels"], changes)
            return lambda: _node_view(node, found)

        return self._transact(op)

    def set_annotations(self, node: str, changes: Mapping[str, str | None]) -> GpuNode:
        """Set or remove node annotations (a merge patch)."""
        _check_keys(changes, label_values=False)

        def op(state: dict[str, Any], now: float) -> Callable[[], GpuNode]:
            found = _node(state, node)
            _merge(found["annotations"], changes)
            return lambda: _node_view(node, found)

        return self._transact(op)

    def set_taint(self, node: str, taint: Taint, present: bool) -> GpuNode:
        """Add or remove one taint (by key and effect), keeping the others. The simulated pods run where their
        workloads put them: a taint is recorded and shown, it moves no pod."""

        def op(state: dict[str, Any], now: float) -> Callable[[], GpuNode]:
            found = _node(state, node)
            taints = found.get("taints", [])
            others = [t for t in taints if (t[0], t[1]) != (taint.key, taint.effect)]
            if (len(others) < len(taints)) != present:
                found["taints"] = [*others, [taint.key, taint.effect, taint.value]] if present else others
            return lambda: _node_view(node, found)

        return self._transact(op)

    def cordon(self, node: str, *, hold: Hold | None = None) -> GpuNode:
        """Cordon; with ``hold``, also :data:`HOLD_ANNOTATION` in the same write, refused on a node someone
        else cordoned."""
        value = hold.to_annotation() if hold is not None else None

        def op(state: dict[str, Any], now: float) -> Callable[[], GpuNode]:
            found = _node(state, node)
            if value is not None:
                if found["unschedulable"] and HOLD_ANNOTATION not in found["annotations"]:
                    raise CordonedByOthers(
                        f"node {node} is cordoned by someone else: not Slicewise's to hold"
                    )
                found["annotations"][HOLD_ANNOTATION] = value
            _set_unschedulable(found, True, now)
            return lambda: _node_view(node, found)

        return self._transact(op)

    def uncordon(self, node: str) -> GpuNode:
        """Uncordon, and drop Slicewise's hold annotation in the same write."""

        def op(state: dict[str, Any], now: float) -> Callable[[], GpuNode]:
            found = _node(state, node)
            found["annotations"].pop(HOLD_ANNOTATION, None)
            _set_unschedulable(found, False, now)
            return lambda: _node_view(node, found)

        return self._transact(op)

    def evict(self, namespace: str, pod: str) -> None:
        """Evict a running pod: it is no longer listed. EvictionBlocked when its workload's PDB says no; a pod
        that is not running counts as already gone."""

        def op(state: dict[str, Any], now: float) -> Callable[[], None]:
            record_eviction(
                self._pods_at(state, now), state["nodes"], namespace, pod, self._workload_config, now
            )
            return lambda: None

        self._transact(op)

    def get_config_map(self, namespace: str, name: str) -> ConfigMap:
        """One ConfigMap (a fresh cluster has those the operator applies from include/k8s/)."""

        def op(state: dict[str, Any], now: float) -> Callable[[], ConfigMap]:
            found = config_map_state(state, namespace, name)
            return lambda: config_map_view(namespace, name, found)

        return self._transact(op)

    def update_config_map(
        self, read: ConfigMap, data: Mapping[str, str], annotations: Mapping[str, str | None]
    ) -> ConfigMap:
        """Merge ``data`` and ``annotations`` in, only if the ConfigMap is still at ``read``'s resourceVersion."""
        _check_keys(annotations, label_values=False)

        def op(state: dict[str, Any], now: float) -> Callable[[], ConfigMap]:
            found = config_map_state(state, read.namespace, read.name)
            if found["resource_version"] != read.resource_version:
                raise ConfigMapChanged(f"configmap {read.namespace}/{read.name} changed since it was read")
            before = (dict(found["data"]), dict(found["annotations"]))
            found["data"].update(data)
            _merge(found["annotations"], annotations)
            if (found["data"], found["annotations"]) != before:
                state["resource_version"] += 1
                found["resource_version"] = str(state["resource_version"])
            return lambda: config_map_view(read.namespace, read.name, found)

        return self._transact(op)

    # -- simulator controls ---------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Advance the emulation to ``clock()`` and persist it (creates the state file when missing)."""
        self._transact(lambda state, now: lambda: None)

    def inject_fault(self, node: str, kind: str) -> None:
        """Arm a MIG-manager fault on ``node``: ``fail``, ``stuck`` or ``none`` (see mig_manager.set_fault)."""
        if kind not in mig_manager.FAULTS:
            raise ValueError(f"fault must be one of {', '.join(mig_manager.FAULTS)}, got {kind!r}")

        def op(state: dict[str, Any], now: float) -> Callable[[], None]:
            mig_manager.set_fault(_node(state, node, managed_only=False), kind, now, self.reconfigure_s)
            return lambda: None

        self._transact(op)

    def reset(self) -> None:
        """Forget everything: the state is initialised from the fleet again."""

        def make(current: dict[str, Any] | None) -> dict[str, Any]:
            # resourceVersions keep counting up: a client holding an old node must not mistake it for new.
            counter = (current or {}).get("resource_version", 0)
            counter = counter if isinstance(counter, int) else 0
            return initial_state(self.fleet, self._catalog, float(self.clock()), counter)

        self._state.replace(make)

    def status(self) -> list[NodeStatus]:
        """Every node (managed or not) with its model, running pod count and operator conditions."""

        def op(state: dict[str, Any], now: float) -> Callable[[], list[NodeStatus]]:
            pods = self._pods_at(state, now)
            rows = []
            for name, node in sorted(state["nodes"].items()):
                running = len(listed_on(pods, name, node))
                conditions = tuple(mig_manager.describe_conditions(node))
                rows.append(NodeStatus(_node_view(name, node), node["model"], running, conditions))
            return lambda: rows

        return self._transact(op)

    def applied_layouts(self) -> AppliedLayouts:
        """What the MIG manager and device plugin have applied on each node, at ``clock()``."""
        return self._transact(lambda state, now: lambda: applied_layouts(state))

    # -- internals ------------------------------------------------------------------------------------------------
    def _transact(self, op: Callable[[dict[str, Any], float], Callable[[], T]]) -> T:
        """Load (or initialise) the state, advance the emulation, run ``op``, advance again, write.

        ``op`` validates before it changes anything and returns a function that builds the result once the
        changed nodes carry their new resourceVersion. If ``op`` raises a ClusterError, the advanced state is
        still written (time moved on), without any change of ``op``; then the error is raised.
        """

        def change(current: dict[str, Any] | None) -> tuple[dict[str, Any], tuple[bool, Any]]:
            now = float(self.clock())
            state = (
                checked_state(current, self.fleet, self._state.path)
                if current is not None
                else initial_state(self.fleet, self._catalog, now)
            )
            self._advance(state, now)
            before = fingerprints(state)
            try:
                finish = op(state, now)
            except ClusterError as exc:
                return state, (False, exc)
            bump_changed(state, before)
            result = finish()
            self._advance(state, now)  # the MIG manager and device plugin react to what op wrote at once
            return state, (True, result)

        ok, value = self._state.transact(change)
        if not ok:
            raise value
        return value

    def _advance(self, state: dict[str, Any], now: float) -> None:
        before = fingerprints(state)
        for name, node in state["nodes"].items():
            forget_evictions(node, now - self._eviction_memory_s)

            def running(at: float, name: str = name, node: NodeState = node) -> list[str]:
                return [p.key for p in listed_on(self._pods_at(state, at), name, node)]

            mig_manager.advance(node, self._catalog, now, self.reconfigure_s, running, self.pickup_s)
        bump_changed(state, before)

    def _pods_at(self, state: dict[str, Any], at: float) -> list[SimulatedPod]:
        return running_pods(self._fleet_for(state), at)

    def _fleet_for(self, state: dict[str, Any]) -> Fleet:
        """The fleet with the applied layouts of ``state`` (cached: layouts change rarely)."""
        layouts = applied_layouts(state)
        key = tuple(sorted(layouts.items()))
        fleet = self._fleets.get(key)
        if fleet is None:
            if len(self._fleets) > 16:
                self._fleets.clear()
            fleet = self._fleets[key] = self.fleet.with_applied(layouts)
        return fleet


# -- plain helpers ----------------------------------------------------------------------------------------------
def _managed(node: NodeState) -> bool:
    return node["labels"].get(MANAGED_LABEL) == "true"


def _node(state: dict[str, Any], name: str, *, managed_only: bool = True) -> NodeState:
    node: NodeState | None = state["nodes"].get(name)
    if node is None or (managed_only and not _managed(node)):
        raise NodeNotFound(f"node {name!r} does not exist or is not managed ({MANAGED_LABEL}=true)")
    return node


def _view_of(state: dict[str, Any], name: str) -> Callable[[], GpuNode]:
    node = _node(state, name)
    return lambda: _node_view(name, node)


def _node_view(name: str, node: NodeState) -> GpuNode:
    labels = dict(node["labels"])
    try:
        gpu_count = max(int(labels.get(GPU_COUNT_LABEL, "0")), 0)
    except ValueError:
        gpu_count = 0
    return GpuNode(
        name=name,
        gpu_product=labels.get(GPU_PRODUCT_LABEL, ""),
        gpu_count=gpu_count,
        mig_config=labels.get(MIG_CONFIG_LABEL, ""),
        mig_config_state=labels.get(MIG_STATE_LABEL, ""),
        device_plugin_config=labels.get(DEVICE_PLUGIN_CONFIG_LABEL, ""),
        allocatable=dict(sorted(node["allocatable"].items())),
        unschedulable=node["unschedulable"],
        labels=labels,
        annotations=dict(node["annotations"]),
        resource_version=node["resource_version"],
        taints=tuple(Taint(key, effect, value) for key, effect, value in node.get("taints", [])),
    )


def _set_unschedulable(node: NodeState, value: bool, now: float) -> None:
    if node["unschedulable"] != value:
        node["unschedulable"] = value
        node["cordoned_at"] = now if value else None


def _merge(target: dict[str, str], changes: Mapping[str, str | None]) -> None:
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value


def _check_keys(changes: Mapping[str, str | None], *, label_values: bool) -> None:
    """Refuse what the API server would refuse (422): malformed keys, and label values over 63 characters
    or with characters other than alphanumerics, ``-``, ``_`` and ``.``."""
    for key, value in changes.items():
        if not _KEY.match(key) or len(key.rpartition("/")[0]) > 253:
            raise ClusterError(f"invalid label/annotation key {key!r}")
        if label_values and value is not None and not _LABEL_VALUE.match(value):
            raise ClusterError(f"invalid label value {value!r} for {key} (at most 63 of [A-Za-z0-9._-])")


def _shown(value: str | None) -> str:
    return "absent" if value is None else repr(value)
