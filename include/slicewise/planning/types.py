"""The planner's inputs and outputs: plain, immutable data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slicewise.cluster.base import GpuNode, GpuPod

KEEP, CHANGE, BLOCKED, DRAIN, SKIP = "keep", "change", "blocked", "cordon-to-drain", "skip"
ACTIONS = (CHANGE, DRAIN, BLOCKED, KEEP, SKIP)


@dataclass(frozen=True)
class SeriesForecast:
    """Forecast mean load (engine activity 0-1) of one GPU or MIG instance over the planning horizon."""

    hostname: str
    gpu: int
    gpu_instance_id: str  # "" for a whole GPU
    mig_profile: str  # "" for a whole GPU
    p50: float
    upper: float  # the upper quantile the planner acts on (P90 by default)
    memory: float = float("nan")  # framebuffer used / capacity, latest hour's P90; NaN = unknown


@dataclass(frozen=True)
class DemandForecast:
    """Forecast pending requests of one kind (:mod:`slicewise.planning.demand`): pods that cannot be scheduled.

    ``p50`` / ``upper`` count requests: units of ``resource`` (nvidia.com/gpu, nvidia.com/mig-1g.10gb), or pods
    when they declare a ``share`` or ask for ``gpus`` > 1; for ``slicewise.io/whole-gpus`` without ``gpus``,
    GPUs."""

    resource: str
    p50: float
    upper: float
    share: float | None = None  # the share of a GPU each pod declares: any form at least that big hosts it
    gpus: int = 1  # GPUs per pod, on one node
    models: tuple[str, ...] = ()  # catalogue GPU models the pods allow; () = any


@dataclass(frozen=True)
class Forecasts:
    """What the forecaster says, and whether the planner may act on it."""

    series: tuple[SeriesForecast, ...]
    demand: tuple[DemandForecast, ...]
    predictor: str  # "champion vN" or a baseline name
    trusted: bool  # champion fresh and better than the baselines (the forecaster Asset's verdict)
    why_untrusted: str = ""
    horizon_minutes: int = 60

    def for_node(self, node: str) -> list[SeriesForecast]:
        return [s for s in self.series if s.hostname == node]


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
    action: str  # change | cordon-to-drain | blocked | keep | skip
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
class FleetPlan:
    policy: str
    predictor: str
    trusted: bool
    horizon_minutes: int
    nodes: tuple[NodePlan, ...]
    notes: tuple[str, ...] = ()

    def count(self, action: str) -> int:
        return sum(1 for plan in self.nodes if plan.action == action)

    def counts(self) -> dict[str, int]:
        return {action: self.count(action) for action in ACTIONS}
