"""How each node shared its GPUs at a given hour: its labels over time, and MPS replicas with their provenance.

DCGM shows MIG instances as their own series, so a MIG layout (and a change of it mid-day) needs no history.
MPS is invisible to DCGM: a shared GPU is one series without pod labels, and how many tenants it holds comes
from the device plugin's config. That config is read from, in order:

1. the node's labels in the layout history at the start of the hour: snapshots of the planner's
   ``plans/<run>/observed.json`` (full label sets) overlaid by the ledger's applied changes (a node DONE in a
   PROMOTED rollout gets its desired labels at ``changed_at``) — method ``observed`` or ``ledger``;
2. the demand frame: more running ``nvidia.com/gpu`` requests on the node than it has GPUs means shared GPUs,
   ``ceil(requests / GPUs)`` replicas at the busiest minute (a lower bound) — method ``demand``;
3. otherwise 1 (not shared) — method ``default``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from slicewise.catalog import Catalog, CatalogError
from slicewise.cluster.base import DEVICE_PLUGIN_CONFIG_LABEL, GPU_PRODUCT_LABEL, MIG_CONFIG_LABEL, GpuNode

OBSERVED, LEDGER, DEMAND, DEFAULT = "observed", "ledger", "demand", "default"


@dataclass(frozen=True)
class LabelEvent:
    """Labels of ``node`` from ``at`` on: a full snapshot (replaces) or a change (overlays)."""

    node: str
    at: datetime
    labels: Mapping[str, str]
    source: str  # OBSERVED | LEDGER
    full: bool


@dataclass(frozen=True)
class NodeLabels:
    labels: Mapping[str, str]
    sources: Mapping[str, str]  # label -> the source of its current value


@dataclass(frozen=True)
class Sharing:
    """MPS replicas of a node's whole GPUs (1 = not shared) and how that number was found."""

    replicas: int
    method: str  # OBSERVED | LEDGER | DEMAND | DEFAULT
    detail: str


def node_labels(node: GpuNode) -> dict[str, str]:
    """A node's labels including the ones ``GpuNode`` keeps as fields (they win: they are what was read)."""
    return {
        **node.labels,
        MIG_CONFIG_LABEL: node.mig_config,
        DEVICE_PLUGIN_CONFIG_LABEL: node.device_plugin_config,
        GPU_PRODUCT_LABEL: node.gpu_product,
    }


def observed_events(at: datetime, nodes: Iterable[GpuNode]) -> list[LabelEvent]:
    """One full snapshot per node observed at ``at``."""
    return [LabelEvent(n.name, at, node_labels(n), OBSERVED, True) for n in nodes]


def ledger_event(node: str, at: datetime, desired: Mapping[str, str | None]) -> LabelEvent:
    """An applied change: the desired labels from ``at`` on (a removed label reads as "", the default)."""
    return LabelEvent(node, at, {k: v or "" for k, v in desired.items()}, LEDGER, False)


@dataclass(frozen=True)
class LayoutHistory:
    events: tuple[LabelEvent, ...]

    @classmethod
    def of(cls, events: Iterable[LabelEvent]) -> LayoutHistory:
        # Snapshots before changes at the same instant: a change recorded then is newer than what was seen.
        return cls(tuple(sorted(events, key=lambda e: (e.at, e.full is False))))

    def at(self, node: str, moment: datetime) -> NodeLabels | None:
        """The node's labels at ``moment`` (events at or before it), or None when nothing is known yet."""
        labels: dict[str, str] = {}
        sources: dict[str, str] = {}
        seen = False
        for event in self.events:
            if event.at > moment:
                break
            if event.node != node:
                continue
            seen = True
            if event.full:
                labels, sources = dict(event.labels), dict.fromkeys(event.labels, event.source)
            else:
                labels.update(event.labels)
                sources.update(dict.fromkeys(event.labels, event.source))
        return NodeLabels(labels, sources) if seen else None


def mps_replicas(
    known: NodeLabels | None, catalog: Catalog, running_requests: Sequence[float], gpus: int
) -> Sharing:
    """Replicas of a node's whole GPUs (see the module docstring for the order).

    ``running_requests``: per minute of the hour, the node's summed running ``nvidia.com/gpu`` requests;
    ``gpus``: how many whole GPUs DCGM shows on the node.
    """
    unknown_config = ""
    if known is not None and DEVICE_PLUGIN_CONFIG_LABEL in known.labels:
        config = known.labels[DEVICE_PLUGIN_CONFIG_LABEL]
        try:
            replicas = catalog.mps_replicas(config)
        except CatalogError:
            unknown_config = f"device-plugin config {config!r} is not in the catalogue; "
        else:
            source = known.sources.get(DEVICE_PLUGIN_CONFIG_LABEL, OBSERVED)
            return Sharing(replicas, source, f"device-plugin.config={config or 'default'} ({source})")
    busiest = max(running_requests, default=0.0)
    if gpus > 0 and busiest > gpus:
        replicas = math.ceil(busiest / gpus - 1e-9)
        return Sharing(
            replicas,
            DEMAND,
            f"{unknown_config}{busiest:g} running nvidia.com/gpu requests on {gpus} GPUs (a lower bound)",
        )
    return Sharing(1, DEFAULT, f"{unknown_config}no layout history and no sign of sharing in the demand")
