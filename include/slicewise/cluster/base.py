"""What Slicewise sees of and does to a Kubernetes GPU cluster: one small interface, two backends.

The backends are :mod:`slicewise.cluster.kubernetes` (the real API through the cncf-kubernetes provider's
``KubernetesHook``) and :mod:`slicewise.simulator.cluster` (the simulated fleet with a MIG-manager emulation).
Everything here is plain data; nothing in this module does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from slicewise import schema
from slicewise.errors import PermanentError

#: Opt-in: only nodes carrying this label with value "true" are listed, planned or changed.
MANAGED_LABEL = "slicewise.io/managed"
#: Opt-in per pod: Slicewise may evict a GPU pod only when it carries this annotation with value "true".
EVICTABLE_ANNOTATION = schema.EVICTABLE_ANNOTATION
#: The share of one GPU a pod declares it needs ("0.5"): opting in to any MIG instance, MPS tenant or whole GPU at
#: least that big (slicewise.planning.demand).
GPU_SHARE_ANNOTATION = schema.GPU_SHARE_ANNOTATION
#: When Slicewise last changed the node's layout (ISO 8601, UTC): the dwell-time guard reads it.
LAST_CHANGE_ANNOTATION = "slicewise.io/last-change"
#: cluster-autoscaler leaves a node with this annotation ("true") alone: never unneeded, never drained or removed.
SCALE_DOWN_DISABLED_ANNOTATION = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
#: Beside it where Slicewise set it (planning.shaped): Slicewise takes off only the marks it made.
SCALE_DOWN_MARK_ANNOTATION = "slicewise.io/scale-down-disabled"
#: On a node Slicewise cordoned to let its non-evictable GPU pods finish (``planner_cordon_to_drain``): the change
#: it waits for and since when (:class:`Hold`, JSON). Written in the same patch as the cordon and removed in the
#: same patch as the uncordon, so a cordoned node carrying it is Slicewise's, whatever run cordoned it.
HOLD_ANNOTATION = "slicewise.io/held-for"

# GPU Operator / GPU Feature Discovery labels (NVIDIA GPU Operator MIG docs; k8s-device-plugin GFD).
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_PRODUCT_LABEL = schema.SELECTOR_NODE_LABELS["gpu_product"]
SHARING_STRATEGY_LABEL = schema.SELECTOR_NODE_LABELS["gpu_sharing"]
REPLICAS_LABEL = schema.SELECTOR_NODE_LABELS["gpu_replicas"]
#: GFD's product suffix on a node whose GPUs are shared (renameByDefault=false; k8s-device-plugin GFD).
SHARED_SUFFIX = "-SHARED"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
#: Nodes whose GPUs the NVIDIA DRA driver allocates carry this label (GPU Operator, "NVIDIA DRA Driver for GPUs":
#: the label selecting the driver's GPU kubelet plugin). There, MIG is the driver's to partition dynamically, and
#: the MIG manager must not run beside it.
DRA_KUBELET_PLUGIN_LABEL = "nvidia.com/dra-kubelet-plugin"
#: cluster-autoscaler's priority expander reads its ranking of node groups from the key ``priorities`` of a ConfigMap
#: of this fixed name in the autoscaler's own namespace (expander/priority).
PRIORITY_EXPANDER_CONFIG_MAP = "cluster-autoscaler-priority-expander"
PRIORITY_EXPANDER_KEY = "priorities"
#: The GPU Operator deploys its device plugin on a node unless this label is "false".
DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"

#: Extended resources that are GPUs or GPU slices: ``nvidia.com/gpu``, ``nvidia.com/gpu.shared`` and the
#: mixed-strategy MIG resources ``nvidia.com/mig-<profile>``.
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


class ClusterError(RuntimeError):
    """The cluster could not be read or changed (unreachable, forbidden, malformed answer)."""


class NodeNotFound(ClusterError):
    """The node does not exist or is not managed by Slicewise."""


class LabelsChanged(ClusterError):
    """The node's labels are no longer what the caller expected: someone else changed them; nothing written."""


class CordonedByOthers(ClusterError):
    """The node is cordoned, and not by Slicewise: not Slicewise's to hold or change; nothing written."""


class ConfigMapNotFound(ClusterError, PermanentError):
    """The ConfigMap does not exist: Slicewise changes ConfigMaps an operator created, never creates one."""


class ConfigMapChanged(ClusterError):
    """The ConfigMap changed since the read a write was based on (409 Conflict): nothing written."""


class EvictionBlocked(ClusterError):
    """The Eviction API refused (HTTP 429: a PodDisruptionBudget allows no disruption now). Retry later."""


@dataclass(frozen=True)
class Taint:
    """A node taint (``spec.taints[]``); ``timeAdded`` is not kept (the API server sets it for NoExecute only)."""

    key: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute
    value: str = ""

    def same(self, other: Taint) -> bool:
        """The same taint as the API server tells them apart: by key and effect."""
        return (self.key, self.effect) == (other.key, other.effect)

    def __str__(self) -> str:
        """As ``kubectl taint`` writes it: ``key=value:effect``, or ``key:effect`` without a value."""
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True)
class Hold:
    """What :data:`HOLD_ANNOTATION` says: the labels a held node waits to be given, and since when it is held."""

    mig_config: str
    device_plugin_config: str
    since: datetime

    def to_annotation(self) -> str:
        return json.dumps(
            {
                "mig.config": self.mig_config,
                "device-plugin.config": self.device_plugin_config,
                "since": self.since.isoformat(),
            },
            sort_keys=True,
        )

    @classmethod
    def from_annotation(cls, value: str) -> Hold | None:
        """The hold, or None when the value is not one Slicewise wrote (then the cordon is still Slicewise's: the
        annotation is there, but what it waited for is unknown)."""
        try:
            data = json.loads(value)
            return cls(
                str(data["mig.config"]),
                str(data["device-plugin.config"]),
                datetime.fromisoformat(str(data["since"])),
            )
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class ConfigMap:
    """A ConfigMap's data and annotations as read, with the resourceVersion a guarded write names."""

    namespace: str
    name: str
    data: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""


#: The planner's standby taints (``planning.standby``), in grade order: a standby node of the fleet's n-th smallest
#: size carries the first n (the fourth smallest and larger all four). ``TaintToleration`` counts the taints a pod
#: does not tolerate, so the scheduler opens a standby node only when no node in use fits, a larger one only when
#: no smaller one does.
STANDBY_TAINTS = tuple(
    Taint(f"slicewise.io/standby{suffix}", "PreferNoSchedule")
    for suffix in ("", "-large", "-larger", "-largest")
)


@dataclass(frozen=True)
class GpuNode:
    """A managed GPU node as the GPU Operator and GPU Feature Discovery describe it."""

    name: str
    gpu_product: str  # label nvidia.com/gpu.product, e.g. NVIDIA-A100-SXM4-80GB or ...-MIG-1g.10gb
    gpu_count: int  # label nvidia.com/gpu.count: physical GPUs
    mig_config: str  # label nvidia.com/mig.config ("" when absent)
    mig_config_state: str  # label nvidia.com/mig.config.state: pending | rebooting | success | failed | ""
    device_plugin_config: str  # label nvidia.com/device-plugin.config ("" = the plugin's default config)
    allocatable: Mapping[str, int]  # GPU resources in status.allocatable, e.g. {"nvidia.com/mig-1g.10gb": 14}
    unschedulable: bool  # cordoned
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""
    taints: tuple[Taint, ...] = ()

    def has_taint(self, taint: Taint) -> bool:
        return any(t.same(taint) for t in self.taints)

    @property
    def held(self) -> bool:
        """Cordoned by Slicewise, across runs, so that its GPU pods finish (:data:`HOLD_ANNOTATION`)."""
        return self.unschedulable and HOLD_ANNOTATION in self.annotations

    def hold(self) -> Hold | None:
        """What the node is held for; None when it is not held (or the annotation cannot be read)."""
        return Hold.from_annotation(self.annotations[HOLD_ANNOTATION]) if self.held else None

    def held_words(self) -> str:
        """How plans and pages name the hold: since when, or that its annotation cannot be read."""
        hold = self.hold()
        since = f"since {hold.since:%Y-%m-%d %H:%M} UTC" if hold else "(its annotation unreadable)"
        return f"held by Slicewise {since}"

    def hands_off(self) -> str:
        """Why Slicewise must not plan or change this node ("" when it may): its GPUs are the NVIDIA DRA
        driver's, the GPU Operator's device plugin does not run on it, or GPU Feature Discovery has not
        labelled it (not a GPU Operator node)."""
        if self.labels.get(DRA_KUBELET_PLUGIN_LABEL, "").lower() == "true":
            return (
                f"its GPUs are allocated by the NVIDIA DRA driver ({DRA_KUBELET_PLUGIN_LABEL}=true): dynamic MIG "
                "is the driver's, and the MIG manager must not run beside it"
            )
        if self.labels.get(DEVICE_PLUGIN_DEPLOY_LABEL, "").lower() == "false":
            return (
                f"the GPU Operator's device plugin does not run here ({DEVICE_PLUGIN_DEPLOY_LABEL}=false): "
                "nothing would advertise the resources of a new layout"
            )
        if not self.gpu_product or self.gpu_count < 1:
            return (
                f"no GPU Feature Discovery labels ({GPU_PRODUCT_LABEL}, {GPU_COUNT_LABEL}): not a GPU Operator "
                "node"
            )
        return ""


@dataclass(frozen=True)
class GpuPod:
    """A pod that requests GPU resources, on a node (or pending, node "")."""

    namespace: str
    name: str
    node: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    requests: Mapping[str, int]  # GPU resources only, summed over the pod's containers
    owner_kind: str  # kind of the controller owner (ReplicaSet, StatefulSet, Job, ...); "" for a bare pod
    owner_name: str
    evictable: bool  # opted in by annotation and no PodDisruptionBudget forbids it right now
    blockers: tuple[str, ...] = ()  # why it may not be evicted, in words (empty when evictable)
    # Opted in, and only PodDisruptionBudgets that allow no disruption right now stand in the way: that can
    # change as replicas become ready, so a drain retries its eviction until a deadline instead of giving up.
    budget_blocked: bool = False
    # The share of one GPU the pod declares it needs (annotation slicewise.io/gpu-share): any MIG instance, MPS
    # tenant or whole GPU at least that big can host it. None: only the resources it requests.
    share: float | None = None
    # Where the pod may run besides its resources: node label -> the values it allows (its nodeSelector, e.g. a
    # pin to one nvidia.com/gpu.product, and the ``In`` expressions of a sole required node-affinity term). A
    # consolidation moves the pod only to nodes that match; empty: any node.
    node_selector: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # When its containers last started (status.startTime): an evicted pod comes back as a new pod, so this is also
    # when it last moved. None: not known.
    started_at: datetime | None = None

    @property
    def may_drain(self) -> bool:
        """Evictable now, or once its disruption budget allows."""
        return self.evictable or self.budget_blocked

    def may_run_on(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` satisfies the pod's node selector (the scheduler would place it there)."""
        return selector_allows(self.node_selector.items(), labels)


def selector_allows(selector: Iterable[tuple[str, Collection[str]]], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy a node selector given as (label, allowed values) pairs."""
    return all(labels.get(key) in values for key, values in selector)


def sharing_labels(product: str, replicas: int) -> dict[str, str]:
    """The labels GPU feature discovery writes for a node whose GPUs are shared among ``replicas`` MPS tenants
    (1: not at all): the sharing strategy, the replica count and, given the node's ``product``, the product with
    ``-SHARED`` while shared (renameByDefault=false)."""
    out = {SHARING_STRATEGY_LABEL: "mps" if replicas > 1 else "none", REPLICAS_LABEL: str(replicas)}
    if product:
        out[GPU_PRODUCT_LABEL] = product.removesuffix(SHARED_SUFFIX) + (SHARED_SUFFIX if replicas > 1 else "")
    return out


class ClusterBackend(Protocol):
    """The only way Slicewise reads or changes the cluster."""

    name: str

    def list_nodes(self) -> list[GpuNode]:
        """Managed GPU nodes (label ``slicewise.io/managed=true``), sorted by name."""
        ...

    def get_node(self, name: str) -> GpuNode:
        """One managed node, fresh; raises NodeNotFound."""
        ...

    def list_gpu_pods(self, node: str) -> list[GpuPod]:
        """Pods on ``node`` requesting GPU resources, not finished, sorted by namespace and name."""
        ...

    def set_labels(
        self, node: str, changes: Mapping[str, str | None], *, expected: Mapping[str, str | None]
    ) -> GpuNode:
        """Set (value) or remove (None) node labels, only if every label in ``expected`` still has that value
        (None = absent); otherwise raise LabelsChanged and write nothing. The write is guarded by the node's
        resourceVersion: a conflict is retried on fresh state (re-checking ``expected``), never blindly.
        Returns the node as written."""
        ...

    def set_annotations(self, node: str, changes: Mapping[str, str | None]) -> GpuNode:
        """Set or remove Slicewise's own node annotations (merge patch)."""
        ...

    def set_taint(self, node: str, taint: Taint, present: bool) -> GpuNode:
        """Add (``present``) or remove the taint with ``taint``'s key and effect, keeping every other taint; the
        write is guarded by the node's resourceVersion (taints are one list: a blind write could drop another
        writer's). Nothing is written when the node is already as asked."""
        ...

    def cordon(self, node: str, *, hold: Hold | None = None) -> GpuNode:
        """Mark the node unschedulable. With ``hold``, the cordon is Slicewise's across runs: the cordon and
        :data:`HOLD_ANNOTATION` are one write, and a node cordoned by someone else is refused (CordonedByOthers,
        nothing written)."""
        ...

    def uncordon(self, node: str) -> GpuNode:
        """Make the node schedulable; Slicewise's hold annotation, where present, goes in the same write."""
        ...

    def evict(self, namespace: str, pod: str) -> None:
        """Evict through the policy/v1 Eviction API; raises EvictionBlocked on HTTP 429 (PDB)."""
        ...

    def get_config_map(self, namespace: str, name: str) -> ConfigMap:
        """One ConfigMap, fresh; raises ConfigMapNotFound."""
        ...

    def update_config_map(
        self, read: ConfigMap, data: Mapping[str, str], annotations: Mapping[str, str | None]
    ) -> ConfigMap:
        """Set the keys of ``data`` and set (value) or remove (None) ``annotations`` on the ConfigMap ``read``
        came from, keeping everything else, only if it is still as ``read`` saw it (its resourceVersion);
        otherwise raise ConfigMapChanged and write nothing. Returns the ConfigMap as written."""
        ...
