"""The simulated cluster's state file: one JSON document of every node's labels, cordon, evictions and GPU
Operator emulation (:class:`slicewise.simulator.mig_manager.NodeState`), shared by several processes (Airflow
task processes, the exporter, the CLI).

Every read-modify-write holds an exclusive ``flock`` on a sibling lock file and replaces the file atomically;
reads hold a shared lock. This module also builds a fresh document from the fleet, checks that a stored one
belongs to it, keeps the nodes' resourceVersions, and reads the applied layouts back out.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from slicewise.catalog import Catalog, CatalogError
from slicewise.catalog.render import K8S_DIR
from slicewise.cluster.base import ClusterError, ConfigMap, ConfigMapNotFound
from slicewise.simulator import mig_manager
from slicewise.simulator.fleet import Applied, Fleet
from slicewise.simulator.mig_manager import NodeState

T = TypeVar("T")
STATE_VERSION = 1
#: Applied layouts as :meth:`Fleet.with_applied` takes them, by node.
AppliedLayouts = dict[str, Applied]
#: The ConfigMaps of a fresh simulated cluster: what an operator applies from include/k8s/ for Slicewise.
SHIPPED_CONFIG_MAPS = (K8S_DIR / "autoscaler-priority-expander.yaml",)


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


# -- the document ---------------------------------------------------------------------------------------------
def initial_state(fleet: Fleet, catalog: Catalog, now: float, resource_version: int = 0) -> dict[str, Any]:
    """A fresh document: every fleet node as the GPU Operator shows it with its configured layout applied.

    ``resource_version`` is where the nodes' resourceVersion counter goes on from. ClusterError names a node
    whose configuration the catalogue does not know.
    """
    nodes: dict[str, NodeState] = {}
    for node in fleet.nodes:
        layout = tuple(sorted(node.mig_devices)) if node.mig_devices else None
        layouts = tuple(layout if node.gpu_has_mig(gpu) else None for gpu in range(node.gpus))
        try:
            nodes[node.name] = mig_manager.initial_node(
                node.name,
                node.model,
                node.gpus,
                node.mig_config,
                layouts,
                node.device_plugin_config,
                node.mps_replicas,
                catalog,
            )
        except CatalogError as exc:
            raise ClusterError(f"node {node.name}: {exc}") from None
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "created_at": now,
        "resource_version": resource_version,
        "nodes": nodes,
    }
    bump_changed(state, {})
    config_maps(state)
    return state


def checked_state(state: dict[str, Any], fleet: Fleet, path: Path) -> dict[str, Any]:
    """``state`` itself if it is this version's document of ``fleet``'s nodes; ClusterError (saying to reset
    the file at ``path``) otherwise."""
    if state.get("version") != STATE_VERSION or not isinstance(state.get("nodes"), dict):
        raise ClusterError(f"{path}: unknown state version; run `slicewise simulate cluster reset`")
    ours = {node.name for node in fleet.nodes}
    if set(state["nodes"]) != ours:
        raise ClusterError(
            f"{path} holds nodes {sorted(state['nodes'])}, the fleet has {sorted(ours)}: it was "
            "initialised from another simulator config; run `slicewise simulate cluster reset`"
        )
    return state


def fingerprints(state: Mapping[str, Any]) -> dict[str, str]:
    """node -> its state as text, resourceVersion left out: compare two to see which nodes changed."""
    return {
        name: json.dumps({**node, "resource_version": ""}, sort_keys=True)
        for name, node in state["nodes"].items()
    }


def bump_changed(state: dict[str, Any], before: Mapping[str, str]) -> None:
    """Give every node that changed since ``before`` a new resourceVersion (one counter, like etcd's)."""
    for name, print_ in fingerprints(state).items():
        if before.get(name) != print_:
            state["resource_version"] += 1
            state["nodes"][name]["resource_version"] = str(state["resource_version"])


def applied_layouts(state: Mapping[str, Any]) -> AppliedLayouts:
    """node -> what its GPUs carry (:class:`Applied`) in a state document."""
    out: AppliedLayouts = {}
    for name, node in state["nodes"].items():
        applied = node["applied"]
        devices = tuple(sorted((str(p), int(c)) for p, c in applied["mig_devices"] or ()))
        mig_gpus = applied.get("mig_gpus")
        out[name] = Applied(
            str(applied["mig_config"]),
            devices,
            int(applied["mps_replicas"]),
            None if mig_gpus is None else int(mig_gpus),
        )
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


def config_maps(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``namespace/name`` -> {data, annotations, resource_version}; a document written before the simulated
    cluster kept ConfigMaps gets the shipped ones (their resourceVersions from the state's counter)."""
    if "config_maps" not in state:
        state["config_maps"] = {}
        for path in SHIPPED_CONFIG_MAPS:
            manifest = yaml.safe_load(path.read_text())
            meta = manifest["metadata"]
            state["resource_version"] += 1
            state["config_maps"][f"{meta['namespace']}/{meta['name']}"] = {
                "data": dict(manifest.get("data") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "resource_version": str(state["resource_version"]),
            }
    found: dict[str, dict[str, Any]] = state["config_maps"]
    return found


def config_map_state(state: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """One ConfigMap of the document; ConfigMapNotFound (saying which exist) when it has none of that name."""
    maps = config_maps(state)
    key = f"{namespace}/{name}"
    if key not in maps:
        hint = f" (the simulated cluster has {', '.join(sorted(maps))})" if maps else ""
        raise ConfigMapNotFound(f"configmap {key} does not exist{hint}")
    return maps[key]


def config_map_view(namespace: str, name: str, found: Mapping[str, Any]) -> ConfigMap:
    return ConfigMap(
        namespace, name, dict(found["data"]), dict(found["annotations"]), str(found["resource_version"])
    )
