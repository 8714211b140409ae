"""The planner's inputs and outputs: plain, immutable data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from slicewise.cluster.base import GpuNode, GpuPod

KEEP, CHANGE, BLOCKED, DRAIN, SKIP = "keep", "change", "blocked", "cordon-to-drain", "skip"
#: A node Slicewise holds (planning.holds) whose change is no longer wanted: lift Slicewise's cordon.
UNCORDON = "uncordon"
ACTIONS = (CHANGE, DRAIN, UNCORDON, BLOCKED, KEEP, SKIP)
#: Names a plan's text lists before "and N more": a fleet's lists can hold thousands of nodes.
SHOWN_NAMES = 10


def shown_names(names: Sequence[str]) -> str:
    """The first :data:`SHOWN_NAMES` names, then how many more; "" for none."""
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return ", ".join(names[:SHOWN_NAMES]) + more


@dataclass(frozen=True)
class NodeObservation:
    """A managed node and the GPU pods on it, as the cluster backend reported them."""

    node: GpuNode
    pods: tuple[GpuPod, ...]


@dataclass(frozen=True)
class DesiredState:
    mig_config: str
    device_plugin_config: str

    def describe(self) -> str:
        return f"mig.config={self.mig_config}, device-plugin.config={self.device_plugin_config or 'default'}"


@dataclass(frozen=True)
class NodePlan:
    """The planner's verdict for one node, with everything a person needs to check it."""

    node: str
    gpu_model: str
    gpus: int
    current: DesiredState
    desired: DesiredState
    action: str  # change | cordon-to-drain | uncordon | blocked | keep | skip
    policy: str
    rule: str  # the rule of the policy that fired, in words
    reasons: tuple[str, ...]
    util_p50: float  # compute-weighted mean forecast load of the node's GPUs (NaN when unknown)
    util_upper: float
    gain_gpu_hours: float  # expected GPU-hours per hour freed or demand served by the change (0 for keep)
    disruption: tuple[str, ...] = ()  # "namespace/pod (OwnerKind)" evicted by the change
    pending_served: Mapping[str, float] = field(default_factory=dict)  # resource -> pods' requests served

    @property
    def changes(self) -> bool:
        return self.action == CHANGE


@dataclass(frozen=True)
class PodMove:
    """One pod to evict from a whole GPU so that it runs on an MPS tenant instead."""

    namespace: str
    pod: str
    node: str  # where it runs now, on a whole GPU
    share: float  # the share of a GPU it declares
    to: tuple[str, ...]  # the MPS nodes with a tenant free that fits it (the scheduler chooses)

    def describe(self) -> str:
        return f"{self.namespace}/{self.pod} ({self.share:g} GPU) from {self.node} to a tenant on {'|'.join(self.to)}"


@dataclass(frozen=True)
class Pin:
    """A node selector pods pinned themselves to (label -> allowed values, sorted), and when a plan last saw a pod
    with it (planning.pinned)."""

    selector: tuple[tuple[str, tuple[str, ...]], ...]
    seen: datetime

    def describe(self) -> str:
        return ", ".join(f"{label} in {'|'.join(values)}" for label, values in self.selector)


@dataclass(frozen=True)
class FleetPlan:
    policy: str
    predictor: str
    trusted: bool
    horizon_minutes: int
    nodes: tuple[NodePlan, ...]
    notes: tuple[str, ...] = ()
    # empty nodes to taint PreferNoSchedule (planning.standby): [i] carry cluster.base.STANDBY_TAINTS[i]
    standby_grades: tuple[tuple[str, ...], ...] = ()
    # nodes to mark cluster-autoscaler.kubernetes.io/scale-down-disabled (planning.shaped)
    scale_down_disabled: tuple[str, ...] = ()
    # fractional pods to evict from whole GPUs so they run on free MPS tenants (planning.rehome)
    moves: tuple[PodMove, ...] = ()
    # node selectors pods pinned themselves to, remembered for the next plan (planning.pinned)
    pins: tuple[Pin, ...] = ()
    # the pins whose nodes hold at most planner_pinned_share of the GPUs, the kinds of node (label, value) on the
    # labels pins name that hold at most planner_scarce_kind_share, and their nodes: kept for pinned pods
    scarce_pins: tuple[Pin, ...] = ()
    scarce_kinds: tuple[tuple[str, str], ...] = ()
    pinned_nodes: tuple[str, ...] = ()

    def count(self, action: str) -> int:
        return sum(1 for plan in self.nodes if plan.action == action)

    def counts(self) -> dict[str, int]:
        return {action: self.count(action) for action in ACTIONS}
