"""``ideal``: the bound every policy is measured against — fractional sharing on every GPU, repacked for free.

What no real cluster has, all at once:

- **any request on any GPU with room**: a GPU is a capacity of 1; a one-GPU request of share *s* fits a GPU with
  *s* left, whatever its model (MIG or not), with no slice sizes, replica counts or layouts;
- **free repacking**: at every event the running pods are placed anew (live migration at no cost), so the
  fleet is always as consolidated as the packer can make it and a pod waits only when the packer finds no
  room for it beside the pods ahead of it;
- **arrival order at no cost**: the pods that arrived first have the GPUs. When a pod leaves, the pods present
  are admitted again in arrival order; a later pod that no longer fits is suspended at no cost (its wait
  resumes) and goes on later where it left off. Without this, a small pod that arrived late could hold the
  room an earlier whole-GPU pod is waiting for, and the "bound" would lose to ``static``;
- **no guard rails, no reconfiguration time, no evictions.**

What stays physical: a whole-GPU request (one or more GPUs) needs that many GPUs with nothing else on them, on
one node; a pod's ``gpu_spec`` models.

The packer, :class:`Packing`: pods placed largest first (whole GPUs, then by share), each on the node in use
where it fits tightest (best fit on the GPU), else on the smallest free node that can hold it (so small loads
do not keep large nodes busy). Packing is NP-hard; this greedy is what "ideal" means here, and the property
test (``tests/unit/whatif/test_ideal.py``) checks that it is never worse than any policy on random small traces.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from slicewise.catalog import Catalog
from slicewise.whatif.engine import HOUR_S, BacktestConfig
from slicewise.whatif.fleet import EPS, WHOLE, Ask
from slicewise.whatif.held import HeldCapacity
from slicewise.whatif.metrics import Meter, PolicyResult
from slicewise.whatif.policies import IDEAL
from slicewise.whatif.trace import TraceNode, TracePod

DEPART, ARRIVE = 0, 1


@dataclass(frozen=True)
class NodeSpec:
    index: int
    name: str
    kind: str
    gpus: int
    price: float


class OpenNode:
    """A node in use: what is left of each GPU and which pods sit where."""

    __slots__ = ("free", "pods", "spec")

    def __init__(self, spec: NodeSpec):
        self.spec = spec
        self.free = [WHOLE] * spec.gpus
        self.pods: dict[int, tuple[tuple[int, ...], float]] = {}

    def fit(self, ask: Ask) -> tuple[int, ...] | None:
        if ask.fractional:
            best = -1
            for gpu, left in enumerate(self.free):
                if left >= ask.share - EPS and (best < 0 or left < self.free[best]):
                    best = gpu
            return None if best < 0 else (best,)
        whole = [gpu for gpu, left in enumerate(self.free) if left >= WHOLE - EPS]
        return tuple(whole[: ask.gpus]) if len(whole) >= ask.gpus else None

    def slack(self, ask: Ask, gpus: tuple[int, ...]) -> float:
        """How much room is left where the request would go (best fit: the least)."""
        if ask.fractional:
            return self.free[gpus[0]] - ask.share
        return sum(1 for left in self.free if left >= WHOLE - EPS) - ask.gpus

    def take(self, pod: int, ask: Ask, gpus: tuple[int, ...]) -> None:
        """Place the pod on ``gpus`` (from :meth:`fit`): each gives it its share."""
        for gpu in gpus:
            self.free[gpu] -= ask.share
        self.pods[pod] = (gpus, ask.share)


Buckets = list[tuple[int, list[int]]]  # (GPUs per node, the node indices of that size), smallest first


class Packing:
    """Pods on nodes, each node in use an :class:`OpenNode`; nodes not in use hold nothing."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        by_size: dict[tuple[str, ...], Buckets],
        spare: frozenset[str] = frozenset(),
    ):
        self.nodes = nodes
        self.by_size = by_size  # eligible nodes by size, per gpu_spec (shared between packings, read-only)
        # Placing pods once (sharing), a pod that may run elsewhere does not open the last free node of a model
        # some pods can run on alone (gpu_spec): they would wait for it as long as it runs. Repacking (ideal) needs
        # no such care, and its packer keeps the smallest node first.
        self.spare = spare
        self.open: dict[int, OpenNode] = {}
        self.where: dict[int, int] = {}  # pod -> node index

    def buckets(self, models: tuple[str, ...]) -> Buckets:
        found = self.by_size.get(models)
        if found is None:
            sizes: dict[int, list[int]] = {}
            for node in self.nodes:
                if not models or node.kind in models:
                    sizes.setdefault(node.gpus, []).append(node.index)
            found = sorted(sizes.items())
            self.by_size[models] = found
        return found

    def _free_node(self, models: tuple[str, ...], at_least: int, room_for: float) -> int | None:
        """A node not in use for a request of ``at_least`` GPUs: the smallest that also holds ``room_for``
        GPUs of demand still to place, else the largest there is; not the last free node of a ``spare`` model
        while another will do."""
        if self.spare:
            free = Counter(
                spec.kind for spec in self.nodes if spec.kind in self.spare and spec.index not in self.open
            )
            kept = {kind for kind in self.spare if free[kind] == 1}
            found = self._free_of(models, at_least, room_for, lambda i: self.nodes[i].kind not in kept)
            if found is not None:
                return found
        return self._free_of(models, at_least, room_for, lambda i: True)

    def _free_of(
        self, models: tuple[str, ...], at_least: int, room_for: float, allowed: Callable[[int], bool]
    ) -> int | None:
        free = [
            (size, next((i for i in nodes if i not in self.open and allowed(i)), None))
            for size, nodes in self.buckets(models)
        ]
        sizes = [(size, index) for size, index in free if index is not None and size >= at_least]
        if not sizes:
            return None
        roomy = [index for size, index in sizes if size >= room_for - EPS]
        return roomy[0] if roomy else sizes[-1][1]

    def add(self, pod: int, ask: Ask, room_for: float = 0.0) -> bool:
        """Place a pod: on the node in use where it fits tightest, else on a free node (see ``_free_node``)."""
        best: tuple[float, int, tuple[int, ...]] | None = None
        for index, node in self.open.items():
            if ask.models and node.spec.kind not in ask.models:
                continue
            gpus = node.fit(ask)
            if gpus is not None:
                key = (node.slack(ask, gpus), index, gpus)
                if best is None or key[:2] < best[:2]:
                    best = key
        if best is None:
            free = self._free_node(ask.models, ask.gpus, room_for)
            if free is None:
                return False
            self.open[free] = self._opened(self.nodes[free])
            gpus = self.open[free].fit(ask)
            assert gpus is not None
            best = (0.0, free, gpus)
        _, index, gpus = best
        self.open[index].take(pod, ask, gpus)
        self.where[pod] = index
        return True

    def _opened(self, spec: NodeSpec) -> OpenNode:
        """A node newly in use (``sharing-modes`` gives its nodes a sharing mode: :mod:`.node_modes`)."""
        return OpenNode(spec)

    def remove(self, pod: int) -> None:
        index = self.where.pop(pod)
        node = self.open[index]
        gpus, share = node.pods.pop(pod)
        for gpu in gpus:
            node.free[gpu] = min(WHOLE, node.free[gpu] + share)
        if not node.pods:
            del self.open[index]

    def node_gpus(self) -> int:
        return sum(node.spec.gpus for node in self.open.values())

    def busy_gpus(self) -> int:
        return sum(sum(1 for left in node.free if left < WHOLE - EPS) for node in self.open.values())

    def cost_rate(self) -> float:
        return sum(node.spec.gpus * node.spec.price for node in self.open.values())

    def taken(self) -> float:
        """GPU-equivalents the placed pods hold: their asks' shares (``sharing-forms`` rounds them up to a form)."""
        return sum(len(gpus) * share for node in self.open.values() for gpus, share in node.pods.values())


#: Makes an empty packing of the nodes (``Packing``, or ``ideal-modes``' packing with one sharing mode per node).
NewPacking = Callable[[Sequence[NodeSpec], dict[tuple[str, ...], Buckets]], Packing]


def pack(
    nodes: Sequence[NodeSpec],
    by_size: dict[tuple[str, ...], Buckets],
    pods: Iterable[tuple[int, Ask]],
    new: NewPacking = Packing,
) -> Packing | None:
    """A fresh packing of ``pods``, largest first; None when the packer finds no room for one of them.

    Three ways of choosing a free node are tried and the packing on fewer node-GPUs kept: the smallest node that
    holds the pod, the smallest that holds all the demand still to place (so three whole-GPU pods go to one
    4-GPU node, not to a 2-GPU node and then the 4-GPU one), and the smallest that holds the pods still to place
    on a GPU each (0.5, 0.6 and 0.6 of a GPU are 1.7 GPUs of demand but share no GPU: three GPUs, so one 4-GPU
    node rather than a 2-GPU node and then the 4-GPU one). When some pods may run only on some GPU
    models, the pods are also tried most constrained first (fewest GPUs they may use, then largest): largest
    first, an 8-GPU pod free to go anywhere could take the one 8-GPU node of the model a pinned pod needs."""
    items = sorted(pods, key=lambda item: (-item[1].gpus, -item[1].share, item[0]))
    orders = [items]
    if any(ask.models for _, ask in items):
        probe = new(nodes, by_size)
        room = {ask.models: sum(size * len(ix) for size, ix in probe.buckets(ask.models)) for _, ask in items}
        orders.append(
            sorted(items, key=lambda item: (room[item[1].models], -item[1].gpus, -item[1].share, item[0]))
        )
    best: Packing | None = None
    for order in orders:
        for look_ahead in (None, "demand", "gpus"):
            packing = new(nodes, by_size)
            demand = sum(ask.gpus * ask.share for _, ask in order)
            gpus = sum(ask.gpus for _, ask in order)
            for pod, ask in order:
                room_for = {None: 0.0, "demand": math.ceil(demand - EPS), "gpus": float(gpus)}[look_ahead]
                if not packing.add(pod, ask, room_for):
                    break
                demand -= ask.gpus * ask.share
                gpus -= ask.gpus
            else:
                if best is None or packing.node_gpus() < best.node_gpus():
                    best = packing
    return best


class _State:
    """What the meter reads: the current packing's figures, refreshed after every change."""

    def __init__(self, total_gpus: int, held: HeldCapacity | None = None):
        self.total_gpus = total_gpus
        self.held = held
        self.work = self.taken = 0.0
        self.busy_gpus = self.busy_node_gpus = 0
        self.busy_cost_rate = 0.0

    @property
    def releasable_gpus(self) -> int:
        return self.total_gpus - self.busy_node_gpus

    @property
    def service_gpus(self) -> int:
        """Without the replays' autoscaler, the bound's removes a node the moment it empties and adds it back at
        once; with it, the bound pays for the node-GPUs it held over the unneeded time (:mod:`.held`)."""
        return self.busy_node_gpus if self.held is None else self.held.held

    def refresh(self, packing: Packing, work: float, now: float) -> None:
        self.work = work
        self.taken = packing.taken()
        self.busy_gpus = packing.busy_gpus()
        self.busy_node_gpus = packing.node_gpus()
        self.busy_cost_rate = packing.cost_rate()
        if self.held is not None:
            self.held.set(now, self.busy_node_gpus)


class IdealReplay:
    """The ``ideal`` bound over a trace: same pods, nodes, window and drain as :class:`~.engine.Replay`."""

    name = IDEAL

    def __init__(
        self,
        pods: tuple[TracePod, ...],
        nodes: list[TraceNode],
        catalog: Catalog,
        config: BacktestConfig,
        window: tuple[float, float],
    ):
        self.pods, self.config = pods, config
        self.start, self.end = window
        models = config.fleet_models(nodes, catalog)
        self.nodes = [
            NodeSpec(i, n.name, n.model, n.gpus, config.price(models.of(n.model)))
            for i, n in enumerate(nodes)
        ]
        self.by_size: dict[tuple[str, ...], Buckets] = {}
        self.new_packing = self._new_packing(nodes, catalog, config)
        self.packing = self.new_packing(self.nodes, self.by_size)
        self.asks = self._asks(pods, nodes, catalog, config)
        self.classes = np.array([p.size_class for p in pods])
        count = len(pods)
        self.remaining = np.array([p.duration_s for p in pods])
        self.waiting_since = np.full(count, np.nan)
        self.waited = np.zeros(count)
        self.started_at = np.full(count, np.nan)
        self.epoch = np.zeros(count, dtype=np.int64)
        self.running: set[int] = set()
        self.waiting: list[int] = []  # in arrival order (pod ids are sorted by arrival)
        self.events: list[tuple[float, int, int, int]] = []
        total = sum(n.gpus for n in nodes)
        unneeded_s = config.scale_down_unneeded_s
        self.state = _State(
            total, None if unneeded_s is None else HeldCapacity(unneeded_s, self.start, total)
        )
        self.meter = Meter(self.start, len(nodes))
        self.work = 0.0
        self.suspensions = 0

    def _new_packing(self, nodes: list[TraceNode], catalog: Catalog, config: BacktestConfig) -> NewPacking:
        """What makes the replay's packings: its start, and every repacking."""
        return Packing

    def _asks(
        self, pods: tuple[TracePod, ...], nodes: list[TraceNode], catalog: Catalog, config: BacktestConfig
    ) -> list[Ask]:
        """What each pod asks the packer for: its GPUs and share, on its models."""
        return [Ask(p.gpus, p.share, p.models) for p in pods]

    def run(self) -> PolicyResult:
        for pod_id, pod in enumerate(self.pods):
            if self.start <= pod.arrival_s < self.end:
                heapq.heappush(self.events, (pod.arrival_s, ARRIVE, pod_id, 0))
        horizon = self.end + self.config.drain_cap_s
        hour = 0
        last_event = self.start
        while True:
            tick = min(self.start + hour * HOUR_S, horizon)
            while self.events and self.events[0][0] < tick:
                when, kind, pod_id, epoch = heapq.heappop(self.events)
                self._advance(when)
                last_event = when
                if kind == ARRIVE:
                    self._arrive(pod_id, when)
                    continue
                # Every pod leaving at this instant leaves before anyone is admitted again.
                leaving = [pod_id] if epoch == self.epoch[pod_id] else []
                while self.events and self.events[0][:2] == (when, DEPART):
                    _, _, other, other_epoch = heapq.heappop(self.events)
                    if other_epoch == self.epoch[other]:
                        leaving.append(other)
                if leaving:
                    self._depart(leaving, when)
            if tick >= horizon or (tick >= self.end and not self.waiting and not self.running):
                stop = tick if tick >= horizon else max(self.end, last_event)
                break
            self._advance(tick)
            self.meter.close_hour(tick)
            hour += 1
        self._advance(stop)
        self.meter.close_hour(stop)
        for pod_id in self.waiting:
            self.waited[pod_id] += stop - self.waiting_since[pod_id]
        arrived = np.array([self.start <= p.arrival_s < self.end for p in self.pods], dtype=bool)
        result = self.meter.result(
            self.name, self.waited[arrived], self.classes[arrived], len(self.waiting), self.state
        )
        # Any share fits any GPU with room: no slots, so no fragmentation to measure; suspensions are free, so
        # no pod is evicted.
        return dataclasses.replace(result, fragmentation=None)

    def _advance(self, when: float) -> None:
        """Meter the state up to ``when``, stopping where the capacity held for the autoscaler falls."""
        if self.state.held is not None:
            for change in self.state.held.falls_before(when):
                self.meter.advance(change, self.state, len(self.waiting))
        self.meter.advance(when, self.state, len(self.waiting))

    # -- events ----------------------------------------------------------------------------------------
    def _arrive(self, pod_id: int, when: float) -> None:
        self.waiting_since[pod_id] = when
        ask = self.asks[pod_id]
        in_use = self.packing.node_gpus()
        if self.packing.add(pod_id, ask):
            self._start(pod_id, when)
            if self.packing.node_gpus() > in_use:  # it took a node of its own: could all fit on fewer?
                self._consolidate()
        else:
            repacked = pack(
                self.nodes, self.by_size, [*self._running_asks(), (pod_id, ask)], self.new_packing
            )
            if repacked is not None:
                self.packing = repacked
                self._start(pod_id, when)
            else:
                self.waiting.append(pod_id)  # the latest arrival: it goes last
        self.state.refresh(self.packing, self.work, when)

    def _consolidate(self) -> None:
        """Free repacking: place the running pods anew when that needs fewer node-GPUs."""
        repacked = pack(self.nodes, self.by_size, self._running_asks(), self.new_packing)
        if repacked is not None and repacked.node_gpus() < self.packing.node_gpus():
            self.packing = repacked

    def _depart(self, pod_ids: list[int], when: float) -> None:
        self._remove(pod_ids)
        if self.waiting:
            self._admit_in_arrival_order(when)
        else:
            self._consolidate()
        self.state.refresh(self.packing, self.work, when)

    def _remove(self, pod_ids: list[int]) -> None:
        """The pods finished: their room is free."""
        for pod_id in pod_ids:
            self.packing.remove(pod_id)
            self.running.discard(pod_id)
            self.work -= self.pods[pod_id].gpus * self.pods[pod_id].share

    def _admit_in_arrival_order(self, when: float) -> None:
        present = sorted([*self.running, *self.waiting])
        admitted: list[tuple[int, Ask]] = []
        packing = self.new_packing(self.nodes, self.by_size)
        failed: set[Ask] = set()
        for pod_id in present:
            ask = self.asks[pod_id]
            if ask in failed:
                continue
            if not packing.add(pod_id, ask):
                repacked = pack(self.nodes, self.by_size, [*admitted, (pod_id, ask)], self.new_packing)
                if repacked is None:
                    failed.add(ask)
                    continue
                packing = repacked
            admitted.append((pod_id, ask))
        keep = {pod_id for pod_id, _ in admitted}
        for pod_id in sorted(self.running - keep):
            self._suspend(pod_id, when)
        self.waiting = [pod_id for pod_id in self.waiting if pod_id not in keep]
        for pod_id in sorted(keep - self.running):
            self._start(pod_id, when)
        consolidated = pack(self.nodes, self.by_size, admitted, self.new_packing)
        self.packing = (
            consolidated
            if consolidated is not None and consolidated.node_gpus() < packing.node_gpus()
            else packing
        )

    def _running_asks(self) -> list[tuple[int, Ask]]:
        return [(pod_id, self.asks[pod_id]) for pod_id in self.running]

    def _start(self, pod_id: int, when: float) -> None:
        waited = when - self.waiting_since[pod_id]
        self.waited[pod_id] += waited
        self.meter.started(waited)
        self.started_at[pod_id] = when
        self.running.add(pod_id)
        self.work += self.pods[pod_id].gpus * self.pods[pod_id].share
        heapq.heappush(self.events, (when + self.remaining[pod_id], DEPART, pod_id, int(self.epoch[pod_id])))

    def _suspend(self, pod_id: int, when: float) -> None:
        self.remaining[pod_id] = max(0.0, self.remaining[pod_id] - (when - self.started_at[pod_id]))
        self.epoch[pod_id] += 1
        self.running.discard(pod_id)
        self.work -= self.pods[pod_id].gpus * self.pods[pod_id].share
        self.waiting_since[pod_id] = when
        self.waiting.append(pod_id)
        self.waiting.sort()
        self.suspensions += 1
