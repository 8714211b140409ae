"""The ``simulated`` cluster backend: the simulated fleet as Kubernetes nodes and GPU pods, with a GPU Operator.

Node labels, annotations, cordons, evictions and the MIG-manager / device-plugin emulation
(:mod:`slicewise.cluster.mig_manager`) live in one JSON state file that several processes share (Airflow task
processes, the exporter, the CLI): every read-modify-write holds an exclusive ``flock`` on a sibling lock file
and replaces the file atomically. The emulation is advanced on every access, at ``clock()``.

Pods are not stored: they are the simulator's own, computed from the load model at ``clock()`` on the layouts
the state says are applied, so their names are those the exporter's kube-state-metrics series carry. The state
only adds what the load model cannot know: evicted pods, and that no new pod lands on a cordoned node or on
one whose GPUs are being reconfigured (the scheduler and the paused device plugin would not let it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from slicewise.catalog import Catalog, CatalogError, load_catalog, resource_for_profile
from slicewise.cluster import mig_manager
from slicewise.cluster.base import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    EVICTABLE_ANNOTATION,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    MANAGED_LABEL,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    ClusterError,
    EvictionBlocked,
    GpuNode,
    GpuPod,
    LabelsChanged,
    NodeNotFound,
)
from slicewise.cluster.mig_manager import NodeState
from slicewise.simulator import noise
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.frames import pod_names
from slicewise.simulator.load import slot_load

T = TypeVar("T")
STATE_VERSION = 1
DEFAULT_RECONFIGURE_S = 20.0
#: Applied layouts as :meth:`Fleet.with_applied` takes them: node -> (mig config, devices per GPU, replicas).
AppliedLayouts = dict[str, tuple[str, tuple[tuple[str, int], ...], int]]

# Kubernetes label/annotation key and label value syntax (apimachinery validation): the API server answers 422.
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")


# -- the state file -------------------------------------------------------------------------------------------
class StateFile:
    """A JSON document shared between processes: exclusive read-modify-write, shared reads, atomic replace."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One open file description per use: flock then also excludes other threads of this process.
        with open(self.lock_path, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> dict[str, Any] | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClusterError(f"{self.path}: not a JSON state file ({exc}); reset it") from None
        if not isinstance(data, dict):
            raise ClusterError(f"{self.path}: not a simulated cluster state; reset it")
        return data

    def read(self) -> tuple[dict[str, Any] | None, tuple[int, int, int] | None]:
        """The document (None when missing) and the file's identity (inode, mtime, size) it was read at."""
        with self._locked(exclusive=False):
            return self._load(), file_key(self.path)

    def transact(self, change: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]) -> T:
        """Run ``change`` on the current document under the exclusive lock; write what it returns if it differs.

        If ``change`` raises, nothing is written.
        """
        with self._locked(exclusive=True):
            current = self._load()
            before = _dumps(current) if current is not None else None
            updated, result = change(current)
            text = _dumps(updated)
            if text != before:
                self._write(text)
            return result

    def replace(self, make: Callable[[dict[str, Any] | None], dict[str, Any]]) -> None:
        """Write ``make(current)`` under the exclusive lock; ``current`` is None when missing or unreadable."""
        with self._locked(exclusive=True):
            try:
                current = self._load()
            except ClusterError:
                current = None
            self._write(_dumps(make(current)))

    def _write(self, text: str) -> None:
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o644)  # mkstemp makes it private; the state is no secret
            with os.fdopen(fd, "w") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)  # readers see the old or the new file, never half of one
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _dumps(document: Any) -> str:
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def file_key(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of ``path``, None when missing: changes whenever the state file is replaced."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


# -- pods -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Pod:
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


def _running_pods(fleet: Fleet, at: float) -> list[_Pod]:
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
            _Pod(
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


def _visible(pod: _Pod, node: NodeState) -> bool:
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


def _owner(workload: str, kind: str) -> tuple[str, str]:
    """The pod's controller owner as Kubernetes reports it: a Deployment's pods belong to a ReplicaSet."""
    if kind == "Deployment":
        return "ReplicaSet", f"{workload}-{noise.stable_hex('replicaset/' + workload, 10)}"
    return kind, workload if kind else ""


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
    ) -> None:
        self._state = state
        self.fleet = fleet
        self.clock = clock
        self.reconfigure_s = reconfigure_s
        self._catalog = catalog
        self._workload_config: Mapping[str, Mapping[str, Any]] = fleet.config.get("workloads", {})
        lifetimes = [c.lifetime_s for c in fleet.classes.values()]
        # An eviction matters until the pod's epoch is over (its slot then holds a new pod): forget it after.
        self._eviction_memory_s = float(max(lifetimes, default=86_400))
        self._fleets: dict[tuple[Any, ...], Fleet] = {}

    @classmethod
    def open(
        cls,
        state_path: Path,
        *,
        fleet: Fleet | None = None,
        clock: Callable[[], float] = time.time,
        reconfigure_s: float | None = None,
        reset: bool = False,
    ) -> SimulatedCluster:
        """The cluster kept in ``state_path``, initialised from ``fleet`` (default ``Fleet.default()``) when the
        file is missing, or whatever it holds with ``reset``. ``reconfigure_s`` defaults to the fleet config's
        ``cluster.reconfigure_s`` (20 s). Raises ClusterError when the file holds another fleet's nodes."""
        fleet = fleet if fleet is not None else Fleet.default()
        if reconfigure_s is None:
            reconfigure_s = float(
                (fleet.config.get("cluster") or {}).get("reconfigure_s", DEFAULT_RECONFIGURE_S)
            )
        if reconfigure_s < 0:
            raise ValueError(f"reconfigure_s must not be negative, got {reconfigure_s}")
        cluster = cls(StateFile(state_path), fleet, clock, float(reconfigure_s), load_catalog())
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
            found = _node(state, node)
            pods = [p for p in self._pods_at(state, now) if p.node == node and _visible(p, found)]
            result = sorted((self._gpu_pod(p) for p in pods), key=lambda p: (p.namespace, p.name))
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

    def cordon(self, node: str) -> GpuNode:
        return self._set_unschedulable(node, True)

    def uncordon(self, node: str) -> GpuNode:
        return self._set_unschedulable(node, False)

    def evict(self, namespace: str, pod: str) -> None:
        """Evict a running pod: it is no longer listed. EvictionBlocked when its workload's PDB says no; a pod
        that is not running counts as already gone."""

        def op(state: dict[str, Any], now: float) -> Callable[[], None]:
            for candidate in self._pods_at(state, now):
                node = state["nodes"][candidate.node]
                if (candidate.namespace, candidate.name) != (namespace, pod) or not _visible(candidate, node):
                    continue
                if self._workload_config.get(candidate.workload, {}).get("pdb_blocks", False):
                    raise EvictionBlocked(
                        f"eviction of pod {namespace}/{pod} refused: Cannot evict pod as it would violate the "
                        "pod's disruption budget."
                    )
                node["evicted"][candidate.slot] = now
            return lambda: None

        self._transact(op)

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
            return self._initial_state(float(self.clock()), counter if isinstance(counter, int) else 0)

        self._state.replace(make)

    def status(self) -> list[NodeStatus]:
        """Every node (managed or not) with its model, running pod count and operator conditions."""

        def op(state: dict[str, Any], now: float) -> Callable[[], list[NodeStatus]]:
            pods = self._pods_at(state, now)
            rows = []
            for name, node in sorted(state["nodes"].items()):
                running = sum(1 for p in pods if p.node == name and _visible(p, node))
                conditions = tuple(mig_manager.describe_conditions(node))
                rows.append(NodeStatus(_node_view(name, node), node["model"], running, conditions))
            return lambda: rows

        return self._transact(op)

    def applied_layouts(self) -> AppliedLayouts:
        """What the MIG manager and device plugin have applied on each node, at ``clock()``."""
        return self._transact(lambda state, now: lambda: applied_layouts(state))

    # -- internals ------------------------------------------------------------------------------------------------
    def _set_unschedulable(self, node: str, value: bool) -> GpuNode:
        def op(state: dict[str, Any], now: float) -> Callable[[], GpuNode]:
            found = _node(state, node)
            if found["unschedulable"] != value:
                found["unschedulable"] = value
                found["cordoned_at"] = now if value else None
            return lambda: _node_view(node, found)

        return self._transact(op)

    def _transact(self, op: Callable[[dict[str, Any], float], Callable[[], T]]) -> T:
        """Load (or initialise) the state, advance the emulation, run ``op``, advance again, write.

        ``op`` validates before it changes anything and returns a function that builds the result once the
        changed nodes carry their new resourceVersion. If ``op`` raises a ClusterError, the advanced state is
        still written (time moved on), without any change of ``op``; then the error is raised.
        """

        def change(current: dict[str, Any] | None) -> tuple[dict[str, Any], tuple[bool, Any]]:
            now = float(self.clock())
            state = self._checked(current) if current is not None else self._initial_state(now)
            self._advance(state, now)
            before = _fingerprints(state)
            try:
                finish = op(state, now)
            except ClusterError as exc:
                return state, (False, exc)
            _bump_changed(state, before)
            result = finish()
            self._advance(state, now)  # the MIG manager and device plugin react to what op wrote at once
            return state, (True, result)

        ok, value = self._state.transact(change)
        if not ok:
            raise value
        return value

    def _advance(self, state: dict[str, Any], now: float) -> None:
        before = _fingerprints(state)
        for name, node in state["nodes"].items():
            memory = now - self._eviction_memory_s
            node["evicted"] = {pod: t for pod, t in node["evicted"].items() if t >= memory}

            def running(at: float, name: str = name, node: NodeState = node) -> list[str]:
                return [p.key for p in self._pods_at(state, at) if p.node == name and _visible(p, node)]

            mig_manager.advance(node, self._catalog, now, self.reconfigure_s, running)
        _bump_changed(state, before)

    def _pods_at(self, state: dict[str, Any], at: float) -> list[_Pod]:
        return _running_pods(self._fleet_for(state), at)

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

    def _gpu_pod(self, pod: _Pod) -> GpuPod:
        config = self._workload_config.get(pod.workload, {})
        owner_kind, owner_name = _owner(pod.workload, str(config.get("owner_kind", "")))
        blockers = []
        if not config.get("evictable", False):
            blockers.append(f"no {EVICTABLE_ANNOTATION}=true annotation")
        if not owner_kind:
            blockers.append("bare pod (no controller)")
        if config.get("pdb_blocks", False):
            blockers.append(f"PodDisruptionBudget {pod.namespace}/{pod.workload} allows 0 disruptions")
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
        )

    def _initial_state(self, now: float, resource_version: int = 0) -> dict[str, Any]:
        nodes: dict[str, NodeState] = {}
        for node in self.fleet.nodes:
            layout = tuple(sorted(node.mig_devices)) if node.mig_devices else None
            try:
                nodes[node.name] = mig_manager.initial_node(
                    node.name,
                    node.model,
                    node.gpus,
                    node.mig_config,
                    layout,
                    node.device_plugin_config,
                    node.mps_replicas,
                    self._catalog,
                )
            except CatalogError as exc:
                raise ClusterError(f"node {node.name}: {exc}") from None
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "created_at": now,
            "resource_version": resource_version,
            "nodes": nodes,
        }
        _bump_changed(state, {})
        return state

    def _checked(self, state: dict[str, Any]) -> dict[str, Any]:
        if state.get("version") != STATE_VERSION or not isinstance(state.get("nodes"), dict):
            raise ClusterError(
                f"{self._state.path}: unknown state version; run `slicewise simulate cluster reset`"
            )
        ours = {node.name for node in self.fleet.nodes}
        if set(state["nodes"]) != ours:
            raise ClusterError(
                f"{self._state.path} holds nodes {sorted(state['nodes'])}, the fleet has {sorted(ours)}: it was "
                "initialised from another simulator config; run `slicewise simulate cluster reset`"
            )
        return state


# -- plain helpers ----------------------------------------------------------------------------------------------
def applied_layouts(state: Mapping[str, Any]) -> AppliedLayouts:
    """node -> (mig config, MIG devices per GPU (empty when MIG is off), MPS replicas) of a state document."""
    out: AppliedLayouts = {}
    for name, node in state["nodes"].items():
        applied = node["applied"]
        devices = tuple(sorted((str(p), int(c)) for p, c in applied["mig_devices"] or ()))
        out[name] = (str(applied["mig_config"]), devices, int(applied["mps_replicas"]))
    return out


def next_due(state: Mapping[str, Any]) -> float | None:
    """The earliest time a pending MIG or device-plugin change of ``state`` completes (None: nothing pending)."""
    dues = [
        part["due"]
        for node in state["nodes"].values()
        for part in (node["mig_manager"], node["device_plugin"])
        if part["due"] is not None
    ]
    return min(dues, default=None)


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
    )


def _fingerprints(state: Mapping[str, Any]) -> dict[str, str]:
    return {
        name: json.dumps({**node, "resource_version": ""}, sort_keys=True)
        for name, node in state["nodes"].items()
    }


def _bump_changed(state: dict[str, Any], before: Mapping[str, str]) -> None:
    """Give every node that changed since ``before`` a new resourceVersion (one counter, like etcd's)."""
    for name, print_ in _fingerprints(state).items():
        if before.get(name) != print_:
            state["resource_version"] += 1
            state["nodes"][name]["resource_version"] = str(state["resource_version"])


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
