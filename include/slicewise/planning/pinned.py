"""Pinned nodes: the few nodes that some pods may only run on, kept for them.

A pod that pins itself to a kind of node (its node selector: a GPU product, say) can wait only for those nodes. When
they are few, one pod that could have run anywhere and lands there shuts the pinned pods out for its whole run: on
the public ``gpuspec10`` trace a 2-GPU pod without a pin took the fleet's only P100 node for 250 hours while up to
36 P100-pinned pods queued, and no plan could move it (it had not opted in to evictions). Kubernetes' scheduler
and cluster-autoscaler's ``least-waste`` expander both pick such a node readily: it is small, so it is the tightest
fit and, empty, the standby taints of :mod:`slicewise.planning.standby` mark it least.

So the planner remembers the selectors pods pinned themselves to (a running pod's ``node_selector``, a pending
request's ``selector``), each for ``planner_pinned_memory_hours`` after it was last seen (the plan carries them to
the next one: pins come and go over days, and a plan sees only the pods of this hour), and calls a selector *scarce*
when the nodes it allows hold at most ``planner_pinned_share`` of the fleet's GPUs (or none: then the autoscaler's
groups of that kind are all its pods have). The nodes a scarce selector allows are kept for the pinned pods, and so
are, once pods pin themselves to a label, the nodes of every kind on it (a value of that label) that holds at most
``planner_scarce_kind_share`` of the GPUs, pinned yet or not: the first pod pinned to a kind comes unannounced, and
on ``gpuspec10`` the autoscaler had added the only V100 node for a pod that could have run anywhere a thousand hours
before it. Of the kept nodes, those without MIG or MPS carry one standby taint more than the fleet's largest size,
in use or not (:mod:`slicewise.planning.standby`; a pod that fits elsewhere goes elsewhere, a pinned pod fits
nowhere else and still gets them), and the plan lists the scarce selectors and kinds for cluster-autoscaler's
priority expander, which should rank their node groups last (a pinned pod's scale-up has no other group, so it still
gets one). A preference, never a refusal; no pod is evicted for it. The planner keeps nodes only while some pod may
not be evicted (or nothing consolidates): otherwise a consolidation takes a pinned node back for a pinned pod that
waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slicewise.catalog.configs import product_without_suffixes
from slicewise.cluster.base import GPU_PRODUCT_LABEL, GpuNode, selector_allows
from slicewise.forecasting.forecasts import Forecasts
from slicewise.planning.demand import Selector
from slicewise.planning.types import NodeObservation, Pin


@dataclass(frozen=True)
class Pinned:
    #: Every pin remembered, in selector order: what the next plan starts from.
    pins: tuple[Pin, ...] = ()
    #: The scarce ones: their nodes hold at most ``planner_pinned_share`` of the fleet's GPUs.
    scarce: tuple[Pin, ...] = ()
    #: The kinds on the labels pins name (label, value) whose nodes hold at most ``planner_scarce_kind_share``
    #: of the fleet's GPUs, pinned yet or not.
    scarce_kinds: tuple[tuple[str, str], ...] = ()
    #: The nodes kept: those a scarce pin allows and those of a scarce kind, in name order.
    nodes: tuple[str, ...] = ()


def _seen_now(observations: Iterable[NodeObservation], forecasts: Forecasts) -> set[Selector]:
    """The node selectors of the pods running now and of the requests pending."""
    seen = {_normal(pod.node_selector.items()) for obs in observations for pod in obs.pods}
    seen |= {_normal(d.node_selector) for d in forecasts.demand}
    seen.discard(())
    return seen


def pinned(
    observations: Sequence[NodeObservation],
    forecasts: Forecasts,
    remembered: Sequence[Pin],
    now: datetime,
    memory_hours: float,
    share: float,
    kind_share: float = 0.0,
) -> Pinned:
    """The pins to remember (``remembered``: the previous plan's) and the nodes kept: those of the scarce pins
    and of every kind on a pinned label that holds at most ``kind_share`` of the GPUs (none with ``share`` 0)."""
    last_seen = {
        pin.selector: pin.seen for pin in remembered if now - pin.seen <= timedelta(hours=memory_hours)
    }
    last_seen.update(dict.fromkeys(_seen_now(observations, forecasts), now))
    pins = tuple(Pin(selector, seen) for selector, seen in sorted(last_seen.items()))
    if share <= 0:
        return Pinned(pins)
    fleet_gpus = sum(obs.node.gpu_count for obs in observations)
    limit = share * fleet_gpus
    scarce: list[Pin] = []
    nodes: set[str] = set()
    for pin in pins:
        allowed = [obs.node for obs in observations if selector_allows(pin.selector, obs.node.labels)]
        if sum(node.gpu_count for node in allowed) <= limit:
            scarce.append(pin)
            nodes.update(node.name for node in allowed)
    labels = {label for pin in pins for label, _ in pin.selector}
    node_kinds = [(obs.node, _kinds_of(obs.node.labels, labels)) for obs in observations]
    kinds = _scarce_kinds(node_kinds, kind_share * fleet_gpus)
    nodes |= {node.name for node, of_node in node_kinds if of_node & kinds}
    return Pinned(pins, tuple(scarce), tuple(sorted(kinds)), tuple(sorted(nodes)))


def _scarce_kinds(
    node_kinds: Sequence[tuple[GpuNode, set[tuple[str, str]]]], limit: float
) -> set[tuple[str, str]]:
    """The kinds of node (a value of a label some pin names; ``node_kinds``: each node's) whose nodes hold at most
    ``limit`` GPUs: a pod that pins itself to one of them later has only those nodes."""
    gpus: Counter[tuple[str, str]] = Counter()
    for node, kinds in node_kinds:
        for kind in kinds:
            gpus[kind] += node.gpu_count
    return {kind for kind, count in gpus.items() if count <= limit}


def _kinds_of(node_labels: Mapping[str, str], labels: set[str]) -> set[tuple[str, str]]:
    """The node's value of each of ``labels`` it carries; the GPU product without the suffix GPU feature discovery
    appends while the node is shared by MPS or split by MIG (one model, whatever its mode)."""
    return {(label, _unshared(label, node_labels[label])) for label in labels & node_labels.keys()}


def _unshared(label: str, value: str) -> str:
    return product_without_suffixes(value) if label == GPU_PRODUCT_LABEL else value


def _normal(selector: Iterable[tuple[str, Iterable[str]]]) -> Selector:
    return tuple(sorted((label, tuple(sorted(values))) for label, values in selector))
