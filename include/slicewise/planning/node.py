"""One node as the planner reasons about it: its GPU model, current layout, MPS replicas, load and requests."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from slicewise.catalog import Catalog, CatalogError, GpuModel, Layout, compute_share, layout_capacity
from slicewise.cluster.base import LAST_CHANGE_ANNOTATION, GpuPod
from slicewise.forecasting.forecasts import SeriesForecast
from slicewise.planning.types import DesiredState, NodeObservation

GPU = "nvidia.com/gpu"


class NotPlannable(Exception):
    """The node cannot be planned now; the message says why (shown as the plan's reason)."""


@dataclass(frozen=True)
class NodeContext:
    obs: NodeObservation
    model: GpuModel
    layout: Layout | None  # None = MIG disabled (whole GPUs, possibly MPS-shared)
    replicas: int  # MPS tenants per GPU (1 = no sharing)
    forecasts: tuple[SeriesForecast, ...]
    split: tuple[int, int] | None = None  # (k, n): ``layout`` on the first k of the n GPUs, the rest whole

    @property
    def name(self) -> str:
        return self.obs.node.name

    @property
    def gpus(self) -> int:
        return self.obs.node.gpu_count

    @property
    def mig(self) -> bool:
        return self.layout is not None

    @property
    def current(self) -> DesiredState:
        return DesiredState(self.obs.node.mig_config, self.obs.node.device_plugin_config or "default")

    @cached_property
    def _requests(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for pod in self.obs.pods:
            total.update(pod.requests)
        return total

    def requests(self) -> Counter[str]:
        """GPU resources requested by the pods on the node."""
        return self._requests

    @cached_property
    def _capacities(self) -> dict[tuple[Layout | None, int], dict[str, int]]:
        return {}

    @cached_property
    def _shares(self) -> dict[tuple[str, int], float]:
        return {}

    def last_change(self) -> datetime | None:
        """When Slicewise last changed the node (``slicewise.io/last-change``); None if never or unreadable (an
        unreadable annotation does not block the node forever)."""
        raw = self.obs.node.annotations.get(LAST_CHANGE_ANNOTATION, "")
        try:
            return datetime.fromisoformat(raw) if raw else None
        except ValueError:
            return None

    def multi_gpu_pods(self) -> list[GpuPod]:
        """Pods asking for more than one whole GPU: the device plugin refuses them under MPS
        (``failRequestsGreaterThanOne`` defaults to true for MPS), so such a node cannot share by MPS."""
        return [pod for pod in self.obs.pods if pod.requests.get(GPU, 0) > 1]

    def weight(self, forecast: SeriesForecast) -> float:
        """Share of a physical GPU's compute a series stands for (g / compute slices for a MIG instance)."""
        if not forecast.mig_profile:
            return 1.0
        profile = self.model.profiles.get(forecast.mig_profile)
        return profile.g / self.model.compute_slices if profile else 0.0

    def utilisation(self) -> tuple[float, float]:
        """Compute-weighted mean forecast load (P50, upper) of the node's GPUs; NaN without forecasts."""
        weights = [self.weight(f) for f in self.forecasts]
        total = sum(weights)
        if not self.forecasts or total <= 0:
            return math.nan, math.nan
        p50 = sum(w * f.p50 for w, f in zip(weights, self.forecasts, strict=True)) / total
        upper = sum(w * f.upper for w, f in zip(weights, self.forecasts, strict=True)) / total
        return p50, upper

    # Policies compare many candidates per node: capacities and shares are computed once each.
    def capacity(self, layout: Layout | None, replicas: int) -> dict[str, int]:
        key = (layout, replicas)
        if key not in self._capacities:
            self._capacities[key] = layout_capacity(self.model, layout, self.gpus, replicas)
        return self._capacities[key]

    def share(self, resource: str, replicas: int) -> float:
        key = (resource, replicas)
        if key not in self._shares:
            self._shares[key] = compute_share(self.model, resource, replicas)
        return self._shares[key]


def node_context(obs: NodeObservation, forecasts: list[SeriesForecast], catalog: Catalog) -> NodeContext:
    """Resolve the node's model and current layout; raises NotPlannable with the reason when it cannot be."""
    node = obs.node
    if reason := node.hands_off():
        raise NotPlannable(f"not Slicewise's to touch: {reason}")
    if node.unschedulable and not node.held:  # Slicewise's own hold is planned (planning.holds)
        raise NotPlannable("node is cordoned (by someone else or a running rollout): left alone")
    if node.mig_config_state in ("pending", "rebooting"):
        raise NotPlannable(
            f"MIG manager is reconfiguring the node (mig.config.state={node.mig_config_state})"
        )
    if node.mig_config_state == "failed":
        raise NotPlannable("the last MIG reconfiguration failed (mig.config.state=failed): needs a person")
    model = catalog.model_for_product(node.gpu_product)
    if model is None:
        raise NotPlannable(f"unknown GPU product {node.gpu_product!r}: not in the catalogue")
    if node.gpu_count < 1:
        raise NotPlannable("label nvidia.com/gpu.count is missing or 0")
    try:
        config = node.mig_config or "all-disabled"
        layout = catalog.layout_of(config, model.name)
        catalog.gpu_layouts(config, model.name, node.gpu_count)  # a split for another node size: not ours
        replicas = catalog.mps_replicas(node.device_plugin_config or "default")
    except CatalogError as exc:
        raise NotPlannable(f"current configuration is not one Slicewise knows: {exc}") from None
    split = catalog.mig_configs[config].split
    return NodeContext(obs, model, layout, replicas, tuple(forecasts), split)


def describe_pod(pod: GpuPod) -> str:
    return f"{pod.namespace}/{pod.name} ({pod.owner_kind or 'bare pod'})"


def mps_replicas_at_most(catalog: Catalog, replicas: int) -> int:
    """The largest shipped MPS config with at most ``replicas`` tenants per GPU (1 = no sharing): never more
    tenants than the load and memory allow."""
    best = 1
    for name in catalog.device_plugin_configs:
        n = catalog.mps_replicas(name)
        if best < n <= replicas:
            best = n
    return best
