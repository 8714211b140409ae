"""The node-side GPU Operator of the simulated cluster: MIG manager, device plugin and GFD, as a state machine.

Pure: every function takes one node's JSON-able state (:class:`NodeState`), the catalogue and a time, and
changes the state in place; :mod:`slicewise.simulator.cluster` keeps the states in a file and calls
:func:`advance` on every access, so time moves the emulation forward without a background thread.

What is emulated follows NVIDIA/mig-parted ``pkg/mig/reconfigure/reconfigure.go`` and the GPU Operator's MIG
docs (docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html):

- MIG manager (§1.2): it reacts only to a *change* of ``nvidia.com/mig.config``, ``pickup_s`` after it first
  sees it (0 by default; a real one is woken by a node watch), its state label still the previous one meanwhile.
  An unknown name, one with no layout for the node's model, or a per-GPU split config (``sw-<k>of<n>-*``: the
  layout on GPUs 0..k-1, the others MIG-disabled, as mig-parted's ``devices: [...]`` entries) for another number
  of GPUs -> ``failed`` at once (``assert --valid-config``);
  a layout already on the GPUs -> ``success`` at once, with no ``pending`` phase; otherwise ``pending`` with the
  operand labels ``nvidia.com/gpu.deploy.*`` set to ``paused-for-mig-change``, and after ``reconfigure_s`` the
  apply: it fails when user GPU pods still run on the node (the MIG manager never evicts them, §1.3), else the
  new layout is applied, the device plugin restarts, the operands come back and the state is ``success``.
  ``failed`` restores the operand labels, like ``setState(failed)``. Faults: ``fail`` (the next apply fails) and
  ``stuck`` (the node stays ``pending``, the path where ``waitForPodsToBeDeleted`` errors without ``setState``).
- Device plugin (§3.2, §3.4): a change of ``nvidia.com/device-plugin.config`` to a known name takes effect after
  the same delay; an unknown name is skipped; MPS on MIG-enabled GPUs is refused with an error.
- GPU Operator / GFD (§1.1, §3.3): the operator re-adds ``nvidia.com/mig.config=all-disabled`` when the label is
  removed; GFD labels (``gpu.product`` with ``-SHARED``, ``gpu.replicas``, ``mig-<profile>.count``) follow what
  is applied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from slicewise.catalog import Catalog, CatalogError, Layout, gpus_capacity, resource_for_profile
from slicewise.cluster.base import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_COUNT_LABEL,
    MANAGED_LABEL,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    sharing_labels,
)

ALL_DISABLED = "all-disabled"
DEFAULT_DEVICE_PLUGIN_CONFIG = "default"
PAUSED = "paused-for-mig-change"
#: Operand labels the MIG manager pauses while it reconfigures (mig-parted reconfigure.go L42-47).
OPERAND_LABELS = (
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm",
)
MIG_MANAGER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
HOSTNAME_LABEL = "kubernetes.io/hostname"
FAULTS = ("none", "fail", "stuck")


class AppliedState(TypedDict):
    """What is really on the GPUs: only the MIG manager and the device plugin change it."""

    mig_config: str  # the config name the layout was applied under
    mig_devices: list[list[Any]] | None  # [[profile, count], ...] per MIG GPU; None = MIG disabled
    # GPUs (the first, by device index) carrying mig_devices under a per-GPU split config, the others whole;
    # None or absent (state files written before splits) = every GPU.
    mig_gpus: NotRequired[int | None]
    mps_replicas: int  # 1 = no MPS
    since: float  # when these MIG devices / MPS tenants appeared (0: before the simulation began)


class MigManagerState(TypedDict):
    seen: str  # the nvidia.com/mig.config value the manager last reacted to
    target: str | None  # the config being applied (state pending)
    since: float | None  # when the pending reconfiguration began
    due: float | None  # when the apply ends; None while pending means stuck
    fault: str  # none | fail | stuck
    message: str  # the last outcome, in words
    # When a changed nvidia.com/mig.config was first seen; the manager reacts ``pickup_s`` later (a real one is
    # woken by a node watch and takes seconds to minutes). Absent in state files written before it existed.
    noticed: float | None


class DevicePluginState(TypedDict):
    seen: str  # the nvidia.com/device-plugin.config value the plugin last reacted to
    target: str | None  # the config it is switching to
    due: float | None
    error: str  # the plugin's complaint about the selected config ("" when none)


class NodeState(TypedDict):
    model: str
    gpus: int
    labels: dict[str, str]
    annotations: dict[str, str]
    unschedulable: bool
    cordoned_at: float | None  # no new pod is scheduled here from then on
    allocatable: dict[str, int]
    resource_version: str
    applied: AppliedState
    mig_manager: MigManagerState
    device_plugin: DevicePluginState
    evicted: dict[str, float]  # pod (its slot and epoch) -> when it was evicted
    taints: NotRequired[list[list[str]]]  # [key, effect, value]; absent in state files written before taints


#: ``running(at)``: the user GPU pods on the node at ``at`` (names), as the apply would find them.
RunningPods = Callable[[float], list[str]]


def applied_layout(node: NodeState) -> Layout | None:
    """The layout on the node's MIG GPUs (None = MIG disabled everywhere), in the catalogue's canonical form."""
    devices = node["applied"]["mig_devices"]
    return None if devices is None else tuple(sorted((str(p), int(c)) for p, c in devices))


def applied_mig_gpus(node: NodeState) -> int:
    """How many GPUs (the first, by device index) carry the applied MIG layout."""
    if node["applied"]["mig_devices"] is None:
        return 0
    count = node["applied"].get("mig_gpus")
    return node["gpus"] if count is None else int(count)


def applied_gpu_layouts(node: NodeState) -> tuple[Layout | None, ...]:
    """The layout of each GPU by device index, as :meth:`Catalog.gpu_layouts` gives a config's."""
    mig = applied_mig_gpus(node)
    return (applied_layout(node),) * mig + (None,) * (node["gpus"] - mig)


def _set_applied_mig(applied: AppliedState, layouts: tuple[Layout | None, ...]) -> None:
    """Record per-GPU ``layouts`` as ``mig_devices`` / ``mig_gpus`` (the MIG GPUs come first and share one
    layout in every config the catalogue ships)."""
    mig = [lay for lay in layouts if lay is not None]
    applied["mig_devices"] = [[p, c] for p, c in mig[0]] if mig else None
    applied["mig_gpus"] = None if not mig or len(mig) == len(layouts) else len(mig)


def initial_node(
    name: str,
    model: str,
    gpus: int,
    mig_config: str,
    layouts: tuple[Layout | None, ...],
    device_plugin_config: str,
    mps_replicas: int,
    catalog: Catalog,
) -> NodeState:
    """A node as the GPU Operator leaves it after a successful start: labels, allocatable, operands up.

    ``layouts``: the layout of each GPU by device index (None = MIG disabled)."""
    node: NodeState = {
        "model": model,
        "gpus": gpus,
        "labels": {
            HOSTNAME_LABEL: name,
            MANAGED_LABEL: "true",
            MIG_CAPABLE_LABEL: "true",
            MIG_STRATEGY_LABEL: "mixed",
            MIG_CONFIG_LABEL: mig_config,
            MIG_STATE_LABEL: "success",
            DEVICE_PLUGIN_CONFIG_LABEL: device_plugin_config,
            MIG_MANAGER_DEPLOY_LABEL: "true",
            **dict.fromkeys(OPERAND_LABELS, "true"),
        },
        "annotations": {},
        "unschedulable": False,
        "cordoned_at": None,
        "allocatable": {},
        "resource_version": "",
        "applied": {
            "mig_config": mig_config,
            "mig_devices": None,
            "mps_replicas": max(1, mps_replicas),
            "since": 0.0,
        },
        "mig_manager": {
            "seen": mig_config,
            "target": None,
            "since": None,
            "due": None,
            "fault": "none",
            "message": "",
            "noticed": None,
        },
        "device_plugin": {"seen": device_plugin_config, "target": None, "due": None, "error": ""},
        "evicted": {},
    }
    _set_applied_mig(node["applied"], layouts)
    _refresh_resources(node, catalog)
    return node


def advance(
    node: NodeState,
    catalog: Catalog,
    now: float,
    reconfigure_s: float,
    running: RunningPods,
    pickup_s: float = 0.0,
) -> None:
    """Bring the node's operator state up to ``now``: react to label changes (the MIG manager ``pickup_s`` after
    it first sees one; until then its state label still tells of the previous change), finish what is due."""
    labels = node["labels"]
    if not labels.get(MIG_CONFIG_LABEL):
        # The GPU Operator's node labeller puts the default back when the label is absent or empty (§1.1).
        labels[MIG_CONFIG_LABEL] = ALL_DISABLED
    manager = node["mig_manager"]
    if labels[MIG_CONFIG_LABEL] != manager["seen"]:
        noticed = manager.get("noticed")
        if noticed is None:
            manager["noticed"] = noticed = now
        if now - noticed >= pickup_s:
            manager["noticed"] = None
            _mig_config_changed(node, catalog, now, reconfigure_s)
    else:
        manager["noticed"] = None  # changed and changed back before the manager reacted: nothing to do
    if labels.get(DEVICE_PLUGIN_CONFIG_LABEL, "") != node["device_plugin"]["seen"]:
        _plugin_config_changed(node, catalog, now, reconfigure_s)
    # Finish what is due in time order: a completed MIG change restarts the plugin and may cancel its switch.
    while True:
        mig_due, plugin_due = node["mig_manager"]["due"], node["device_plugin"]["due"]
        dues = [
            (d, kind) for d, kind in ((mig_due, "mig"), (plugin_due, "plugin")) if d is not None and d <= now
        ]
        if not dues:
            return
        due, kind = min(dues)
        if kind == "mig":
            _finish_mig_change(node, catalog, due, running)
        else:
            _finish_plugin_change(node, catalog, due)


def set_fault(node: NodeState, kind: str, now: float, reconfigure_s: float) -> None:
    """Arm a fault for the node's MIG manager: ``fail`` (next apply fails), ``stuck`` (stays pending), ``none``.

    Clearing a fault while the node is stuck restarts the MIG manager, which runs the pending change again.
    """
    if kind not in FAULTS:
        raise ValueError(f"fault must be one of {', '.join(FAULTS)}, got {kind!r}")
    manager = node["mig_manager"]
    manager["fault"] = kind
    if manager["target"] is None:
        return
    if kind == "stuck":
        manager["due"] = None
    elif manager["due"] is None:
        manager["due"] = now + reconfigure_s


def pending_since(node: NodeState) -> float | None:
    """When the running MIG reconfiguration began (None when none is running)."""
    return node["mig_manager"]["since"] if node["mig_manager"]["target"] is not None else None


# -- MIG manager ----------------------------------------------------------------------------------------------
def _mig_config_changed(node: NodeState, catalog: Catalog, now: float, reconfigure_s: float) -> None:
    manager = node["mig_manager"]
    wanted = node["labels"][MIG_CONFIG_LABEL]
    manager["seen"] = wanted
    try:
        target = catalog.gpu_layouts(wanted, node["model"], node["gpus"])
    except CatalogError as exc:  # nvidia-mig-parted assert --valid-config
        _set_state(node, "failed", f"{wanted!r} is not a valid config for this node: {exc}")
        return
    if target == applied_gpu_layouts(node):  # nvidia-mig-parted assert: already applied, no pending phase
        node["applied"]["mig_config"] = wanted
        _set_state(node, "success", f"{wanted} is already applied")
        return
    manager.update(
        {
            "target": wanted,
            "since": now,
            "due": None if manager["fault"] == "stuck" else now + reconfigure_s,
            "message": f"applying {wanted}",
        }
    )
    node["labels"][MIG_STATE_LABEL] = "pending"
    for label in OPERAND_LABELS:
        if node["labels"].get(label) == "true":  # a label that was false stays false
            node["labels"][label] = PAUSED


def _finish_mig_change(node: NodeState, catalog: Catalog, at: float, running: RunningPods) -> None:
    manager = node["mig_manager"]
    target = manager["target"]
    if target is None:  # only a pending change has a due time; never loop on a malformed state
        manager["due"] = None
        return
    if manager["fault"] == "fail":
        manager["fault"] = "none"  # a one-shot fault: the next apply works again
        _set_state(node, "failed", f"mig-parted apply of {target} failed (injected fault)")
        return
    busy = running(at)
    if busy:
        shown = ", ".join(busy[:3]) + (f" and {len(busy) - 3} more" if len(busy) > 3 else "")
        _set_state(node, "failed", f"mig-parted apply of {target} failed: GPUs in use by {shown}")
        return
    layouts = catalog.gpu_layouts(target, node["model"], node["gpus"])
    node["applied"].update({"mig_config": target, "since": at})
    _set_applied_mig(node["applied"], layouts)
    layout = applied_layout(node)
    node["evicted"].clear()  # new MIG devices: new slots, new pods
    # The device plugin comes back with the operands and reads its config label afresh.
    plugin = node["device_plugin"]
    plugin.update({"seen": node["labels"].get(DEVICE_PLUGIN_CONFIG_LABEL, ""), "target": None, "due": None})
    replicas = _plugin_replicas(catalog, plugin["seen"])
    running_config = plugin["seen"]
    if replicas is None:  # an unknown name: the plugin keeps the config it had (its error stays)
        replicas = node["applied"]["mps_replicas"]
        running_config = f"mps-{replicas}"
    else:
        plugin["error"] = ""
    if replicas > 1 and layout is not None:
        # The plugin refuses MPS on MIG devices and serves the new MIG devices unshared.
        plugin["error"] = _mps_on_mig(running_config)
        replicas = 1
    node["applied"]["mps_replicas"] = replicas
    _refresh_resources(node, catalog)
    _set_state(node, "success", f"{target} applied")


def _set_state(node: NodeState, state: str, message: str) -> None:
    """Write the final state; like setState, put paused operands back first."""
    for label in OPERAND_LABELS:
        if node["labels"].get(label) == PAUSED:
            node["labels"][label] = "true"
    node["labels"][MIG_STATE_LABEL] = state
    node["mig_manager"].update({"target": None, "since": None, "due": None, "message": message})


# -- device plugin --------------------------------------------------------------------------------------------
def _plugin_replicas(catalog: Catalog, config: str) -> int | None:
    try:
        return catalog.mps_replicas(config or DEFAULT_DEVICE_PLUGIN_CONFIG)
    except CatalogError:
        return None


def _mps_on_mig(config: str) -> str:
    return f"{config}: sharing with MPS is not supported on devices with MIG enabled; config not applied"


def _plugin_config_changed(node: NodeState, catalog: Catalog, now: float, reconfigure_s: float) -> None:
    plugin = node["device_plugin"]
    wanted = node["labels"].get(DEVICE_PLUGIN_CONFIG_LABEL, "")
    plugin["seen"] = wanted
    replicas = _plugin_replicas(catalog, wanted)
    if replicas is None:  # "If it is set to an unknown value, it will skip reconfiguration."
        plugin["error"] = f"unknown config {wanted!r}: reconfiguration skipped"
        return
    if replicas > 1 and applied_layout(node) is not None:
        plugin.update({"target": None, "due": None, "error": _mps_on_mig(wanted)})
        return
    plugin.update({"target": wanted or DEFAULT_DEVICE_PLUGIN_CONFIG, "due": now + reconfigure_s, "error": ""})


def _finish_plugin_change(node: NodeState, catalog: Catalog, at: float) -> None:
    plugin = node["device_plugin"]
    target = plugin["target"]
    if target is None:
        plugin["due"] = None
        return
    plugin.update({"target": None, "due": None})
    replicas = _plugin_replicas(catalog, target) or 1
    if replicas > 1 and applied_layout(node) is not None:  # MIG came on while the switch was under way
        plugin["error"] = _mps_on_mig(target)
        return
    if replicas != node["applied"]["mps_replicas"]:
        node["evicted"].clear()  # other MPS tenants per GPU: new slots, new pods
        node["applied"].update({"mps_replicas": replicas, "since": at})
    _refresh_resources(node, catalog)


# -- GFD and the kubelet ----------------------------------------------------------------------------------------
def _refresh_resources(node: NodeState, catalog: Catalog) -> None:
    """Allocatable and GFD labels from what is applied (GFD relabels when the operands come back)."""
    model = catalog.model(node["model"])
    replicas = node["applied"]["mps_replicas"]
    node["allocatable"] = gpus_capacity(model, applied_gpu_layouts(node), replicas)
    labels = node["labels"]
    for key in [k for k in labels if k.startswith("nvidia.com/mig-") and k.endswith(".count")]:
        del labels[key]
    for profile, count in applied_layout(node) or ():
        labels[resource_for_profile(profile) + ".count"] = str(count * applied_mig_gpus(node))
    labels.update(sharing_labels(model.gpu_product, replicas))
    labels[GPU_COUNT_LABEL] = str(node["gpus"])


def describe_conditions(node: NodeState) -> list[str]:
    """What a person should know about the node's operator state, in words (empty when all is quiet)."""
    notes: list[str] = []
    manager, plugin = node["mig_manager"], node["device_plugin"]
    if manager["target"] is not None:
        notes.append(
            f"mig-manager: applying {manager['target']}" + (" (stuck)" if manager["due"] is None else "")
        )
    elif node["labels"].get(MIG_STATE_LABEL) == "failed":
        notes.append(f"mig-manager: {manager['message']}")
    if manager["fault"] != "none":
        notes.append(f"fault armed: {manager['fault']}")
    if plugin["target"] is not None:
        notes.append(f"device-plugin: switching to {plugin['target']}")
    if plugin["error"]:
        notes.append(f"device-plugin: {plugin['error']}")
    return notes
