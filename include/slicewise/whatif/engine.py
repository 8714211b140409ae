"""Replay a pod trace on the simulated fleet under one policy, hour by hour, and measure it.

Events, in time order (at the same instant: departures, nodes coming back, arrivals, removals): a pod arrives
and queues; the queue is tried in arrival order, each pod placed by the scheduler model
(:mod:`slicewise.whatif.fleet`), and a pod that fits starts and runs for its trace duration. At every whole hour
the policy's planner (Slicewise's ``plan_fleet``, unchanged) sees the nodes, their pods and a forecast, and its
``change`` verdicts are applied: the node's pods are evicted and requeue (ahead of later arrivals, with their
remaining run time plus ``eviction_cost_s`` of restart and warm-up), and the node takes ``reconfigure_s``
before its new slots exist (``drain_s`` for a consolidation, which keeps the configuration: the node stays
cordoned while its pods find room elsewhere). A consolidation that only empties the node
(``planner_consolidation=nodes``: the plan hosts nothing there) releases it: the cluster autoscaler removes it,
and the scheduler model places nothing there until pods fit no node in service; the autoscaler then adds back,
empty, after ``scale_up_s``, as many released nodes as they need, in one scale-up (cluster-autoscaler's
binpacking estimator). With ``scale_down_unneeded_s`` the autoscaler does the same to every node of every policy
that stays empty (no pod, not being changed) that long, a consolidated one included (then no longer removed at
once): it soft-taints it meanwhile (the scheduler model then prefers other nodes with room) and removes it, to be
added back as above. Below ``scale_down_utilization_threshold`` of GPU utilisation a node in use is unneeded too
while the autoscaler's simulation fits its pods elsewhere (checked at every step); it is drained, its pods
evicted, and removed the same way (the oracle's look-ahead runs these drains too). No node is removed within
``scale_down_delay_after_add_s`` of the autoscaler's last scale-up. A node added back is a new machine of its
node group: in the configuration the replay started it in, with no last change; or, with ``shared_node_group``,
for a fractional pod that fits an MPS tenant under a policy that shares GPUs, a machine of the group shared by
MPS. The planner's own guard rails apply as in production: hysteresis, dwell time (from the
``slicewise.io/last-change`` annotation the backtest sets) and the hourly change budget.
After the window the replay goes on, without arrivals, until every pod has been served (at most
``drain_cap_s``).

An hour whose planner inputs cannot differ from the previous hour's (no event for two hours, nothing waiting,
no change in the last plan, no node inside its dwell time, and for the oracle no event in the next hour) is not
planned again: the planner is pure, so its plan would be the same "keep everything".
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import heapq
import math
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from slicewise.catalog import Catalog, GpuModel
from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.cluster.base import HOLD_ANNOTATION, LAST_CHANGE_ANNOTATION, GpuNode, GpuPod, Hold
from slicewise.forecasting.baselines import mean_last_hour, p90_last_hour
from slicewise.forecasting.forecasts import DemandForecast, Forecasts, SeriesForecast
from slicewise.planning.config import PlannerConfig
from slicewise.planning.consolidation import RULE as CONSOLIDATED
from slicewise.planning.demand import Request, request_for
from slicewise.planning.planner import plan_fleet
from slicewise.planning.reserve import RESERVE_REPLICAS
from slicewise.planning.types import DRAIN, UNCORDON, DesiredState, NodeObservation, NodePlan, Pin, PodMove
from slicewise.whatif.fleet import EPS, FIRST_FIT, Ask, ReplayFleet, SimNode
from slicewise.whatif.gpus import FleetModels, resolve_models
from slicewise.whatif.metrics import (
    AUTOSCALER,
    CONSOLIDATION,
    RECONFIGURATION,
    REHOME,
    Meter,
    PolicyResult,
)
from slicewise.whatif.policies import FUTURE, MIG_OFF, NOW, Policy, initial_configs, whole_gpu_share
from slicewise.whatif.trace import TraceNode, TracePod

HOUR_S = 3600.0
DAY_S = 86_400.0
DEPART, BACK, ARRIVE, UNNEEDED = 0, 1, 2, 3
EPOCH = datetime(2023, 1, 1, tzinfo=UTC)  # the trace's second 0 (anonymised; only differences matter)
#: The node list's GPU model name of a node, as a label: what a pod's ``gpu_spec`` pins it to. Under
#: ``--gpu-model`` every node is one catalogue model, but the scheduler model still keeps a pinned pod to the
#: nodes its ``gpu_spec`` names, so the planner sees the pin as a node selector on this label.
TRACE_MODEL_LABEL = "slicewise.io/trace-gpu-model"
EVICTABLE = ("all", "best-effort", "annotated")
#: Why a trace pod that does not opt in may not be evicted, per ``BacktestConfig.evictable``.
NOT_OPTED_IN = {
    "best-effort": ("no slicewise.io/evictable=true annotation (the replay: not a best-effort pod)",),
    "annotated": ("no slicewise.io/evictable=true annotation",),
}


@dataclass(frozen=True)
class BacktestConfig:
    gpu_model: str | None = None  # every GPU as this catalogue model; None: each node's own (whatif.gpus)
    model_map: Mapping[str, str] = field(default_factory=dict)  # node-list model name -> catalogue model
    scheduler: str = FIRST_FIT  # the scheduler model: first-fit, spread or binpack (whatif.fleet)
    prefer_shared: bool = True  # fractional pods prefer MPS nodes (the affinity docs/planner.md recommends)
    reconfigure_s: float = 300.0  # a node is gone this long for a layout or MPS change
    drain_s: float = (
        60.0  # a consolidated node stays cordoned this long while its pods are evicted and placed
    )
    eviction_cost_s: float = 300.0  # run time an evicted pod loses on top (restart, image, warm-up)
    drain_cap_s: float = 30 * DAY_S  # serve the pods left at the window's end for at most this long
    # Which pods opt in to Slicewise's evictions (slicewise.io/evictable): "all"; "best-effort" (the trace's qos
    # BE only; LS, Burstable and Guaranteed pods block a change of their node, or, with the planner's
    # cordon_to_drain, get it held until they end); or "annotated" (the pods whose annotation a cluster's own
    # history shows: TracePod.opted_in). The autoscaler's own drains are not affected.
    evictable: str = "all"
    scale_up_s: float = 300.0  # the autoscaler takes this long to add back a node released by a consolidation
    # cluster-autoscaler's --scale-down-unneeded-time for every node of every policy: a node empty this long is
    # removed (soft-tainted meanwhile) and added back as a released one; None: only consolidations release nodes
    scale_down_unneeded_s: float | None = None
    # without scale_down_unneeded_s: no autoscaler at all, so a node a consolidation empties stays in service, idle
    # and free to take pods again, as static's empty nodes do (False: it is removed and added back after scale_up_s)
    keep_released: bool = False
    # with scale_down_unneeded_s: cluster-autoscaler's --scale-down-utilization-threshold (0.5 is its default): a
    # node whose GPU utilisation is under it and whose pods all fit elsewhere is unneeded too, and is drained
    # (its pods evicted) and removed once unneeded that long; 0: only empty nodes are removed
    scale_down_utilization_threshold: float = 0.5
    # with scale_down_unneeded_s: cluster-autoscaler's --scale-down-delay-after-add (600 s, its default): no node
    # is removed this long after the autoscaler last added one (nodes stay unneeded meanwhile)
    scale_down_delay_after_add_s: float = 600.0
    # a node the autoscaler adds for a fractional pod that fits an MPS tenant comes from a second node group of the
    # same machines, shared by MPS (the reserve's tenants per GPU); only for policies that share GPUs
    shared_node_group: bool = True
    # with shared_node_group: only machine types of at most this many GPUs have such a group (None: every type); a
    # larger machine the autoscaler adds for a fractional pod comes up whole. On a cluster whose whole-GPU pods
    # need the large machines, an MPS node there holds their GPUs for a few fractional pods; on the public traces it
    # costs more than it saves (docs/backtest.md, "The group only for the small machines")
    shared_node_group_max_gpus: int | None = None
    step_s: int = 300  # load samples for the forecaster's baselines
    # The planner runs this long past each hour of the replay, as the hourly DAG runs at some minute of the hour (a
    # multiple of step_s under an hour; 0: on the hour). Which minute is arbitrary, and on a few busy samples a
    # burst that arrives just before or after a plan moves the mean wait by tens of points
    # (benchmarks/backtest_samples.py --plan-offsets; docs/backtest.md, "The planner's clock").
    plan_offset_s: int = 0
    # As production: act on the baseline forecast; nodes without MIG are left alone unless asked.
    planner: PlannerConfig = field(default_factory=lambda: PlannerConfig(fallback="baseline"))
    price_per_gpu_hour: float = 0.0  # for GPU models without a price of their own
    prices: Mapping[str, float] = field(default_factory=dict)  # catalogue model -> price per GPU-hour

    @classmethod
    def priced(cls, **fields: Any) -> BacktestConfig:
        """``fields`` with the shipped price list (``costs.pricing``), which the replay's cost figures use."""
        from slicewise.costs.pricing import load_prices

        prices = load_prices()
        return cls(
            price_per_gpu_hour=prices.default_price,
            prices={name: price.per_gpu_hour for name, price in prices.models.items()},
            **fields,
        )

    def __post_init__(self) -> None:
        if self.evictable not in EVICTABLE:
            raise ValueError(f"evictable must be one of {', '.join(EVICTABLE)}, got {self.evictable!r}")
        if self.shared_node_group_max_gpus is not None and self.shared_node_group_max_gpus < 1:
            raise ValueError(
                f"shared_node_group_max_gpus must be at least 1, got {self.shared_node_group_max_gpus}"
            )
        if not 0 <= self.plan_offset_s < HOUR_S or self.plan_offset_s % self.step_s:
            raise ValueError(
                f"plan_offset_s must be a multiple of step_s ({self.step_s} s) under an hour, got "
                f"{self.plan_offset_s}"
            )

    def fleet_models(self, nodes: Sequence[TraceNode], catalog: Catalog) -> FleetModels:
        return resolve_models((n.model for n in nodes), catalog, self.gpu_model, self.model_map)

    def price(self, model: GpuModel) -> float:
        return self.prices.get(model.name, self.price_per_gpu_hour)


class Replay:
    """One policy's run over the trace."""

    def __init__(
        self,
        policy: Policy,
        pods: tuple[TracePod, ...],
        nodes: list[TraceNode],
        catalog: Catalog,
        config: BacktestConfig,
        window: tuple[float, float],
        initial: Sequence[tuple[str, str]] | None = None,
    ):
        """``initial``: (mig.config, device-plugin config) per node, instead of the policy's starting fleet."""
        self.policy, self.pods, self.catalog, self.config = policy, pods, catalog, config
        self.planner = dataclasses.replace(
            config.planner,
            policy=policy.planner or config.planner.policy,
            consolidation=policy.consolidation or config.planner.consolidation,
            standby=config.planner.standby if policy.standby is None else policy.standby,
            whole_gpu_demand=policy.whole_gpu_demand or config.planner.whole_gpu_demand,
            mps_release_below=(
                config.planner.mps_release_below
                if policy.mps_release_below is None
                else policy.mps_release_below
            ),
        )
        self.start, self.end = window
        models = config.fleet_models(nodes, catalog)
        node_models = [models.of(n.model) for n in nodes]
        configs = initial or initial_configs(
            policy, [m.mig for m in node_models], whole_gpu_share(pods, self.start, self.end)
        )
        self.fleet = ReplayFleet(
            [
                SimNode(n.name, n.gpus, model, catalog, mig, plugin, n.model, config.price(model))
                for n, model, (mig, plugin) in zip(nodes, node_models, configs, strict=True)
            ],
            config.scheduler,
            config.prefer_shared,
        )
        self.index = {n.name: i for i, n in enumerate(self.fleet.nodes)}
        self.group_configs = list(configs)  # what a node the autoscaler adds back comes with
        count = len(pods)
        self.remaining = np.array([p.duration_s for p in pods])
        self.waiting_since = np.full(count, np.nan)
        self.waited = np.zeros(count)
        self.started_at = np.full(count, np.nan)
        self.epoch = np.zeros(count, dtype=np.int64)
        self.node_of = np.full(count, -1, dtype=np.int64)
        self.running = 0
        self.queue: list[int] = []  # pod ids in arrival order (pod ids are sorted by arrival)
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, pod or node, epoch or -)
        self.meter = Meter(self.start, len(nodes))
        self.history: dict[int, list[tuple[float, float]]] = {}  # node -> (time, load per GPU) changes
        self.pending_changes: dict[int, tuple[str, str]] = {}
        self.releasing: set[int] = set()  # nodes being drained that the autoscaler removes once empty
        self.adding: set[int] = set()  # released nodes the autoscaler is adding back
        self.last_event = -math.inf
        self.last_scale_up = -math.inf  # when the autoscaler last added a node
        self.kept: set[int] = set()  # nodes the last plan marked scale-down-disabled (planning.shaped)
        self.pins: tuple[Pin, ...] = ()  # the last plan's, for the next (planning.pinned)
        self.last_plan_changed = True
        self.last_change_any = -math.inf
        self.demand_of = [p.gpus * p.share for p in pods]
        self.asks = [Ask(p.gpus, p.share, p.models) for p in pods]
        self.classes = np.array([p.size_class for p in pods])
        self.arrivals = [p.arrival_s for p in pods]
        self.wants = [self._wants(p, models) for p in pods]
        self._selectors: list[Mapping[str, tuple[str, ...]]] = [
            {TRACE_MODEL_LABEL: p.models} if p.models else {} for p in pods
        ]
        self.pod_ids = {p.name: i for i, p in enumerate(pods)}  # how plans name a pod (planning.rehome)
        self._evictable = [_opted_in(p, config.evictable) for p in pods]
        self.holds: dict[int, Hold] = {}  # nodes held so that their pods finish (planning.holds)
        self.queued_demand: Counter[Request] = Counter()  # the waiting requests, per kind
        self.waiting_samples: deque[Counter[Request]] = deque(maxlen=int(HOUR_S // config.step_s))

    # -- events --------------------------------------------------------------------------------------
    def run(self) -> PolicyResult:
        for pod_id, pod in enumerate(self.pods):
            if self.start <= pod.arrival_s < self.end:
                heapq.heappush(self.events, (pod.arrival_s, ARRIVE, pod_id, 0))
        for node in self.fleet.nodes:
            self._maybe_unneeded(node, self.start)
        per_hour = int(HOUR_S // self.config.step_s)
        # The first plan an hour (and the offset) after the start: the hour before it is what it forecasts from.
        plan_step = self.config.plan_offset_s // self.config.step_s
        horizon = self.end + self.config.drain_cap_s
        step = 0
        while True:
            tick = min(self.start + step * self.config.step_s, horizon)
            while self.events and self.events[0][0] < tick:
                self._handle(*heapq.heappop(self.events))
            self._scale_down_underused(tick)
            if tick >= horizon or (tick >= self.end and not self.queue and not self.running):
                stop = tick if tick >= horizon else max(self.end, self.last_event)
                break
            self.meter.advance(tick, self.fleet, len(self.queue))
            self.waiting_samples.append(+self.queued_demand)
            self.meter.sample_fragmentation(self.fleet.fragmentation(self._recent_requests(tick)))
            if self.policy.planner and step > plan_step and (step - plan_step) % per_hour == 0:
                self._plan(tick)
            if step % per_hour == 0:
                self.meter.close_hour(tick)
            step += 1
        self.meter.advance(stop, self.fleet, len(self.queue))
        self.meter.close_hour(stop)
        for pod_id in self.queue:  # still waiting when the replay gave up: censored there
            self.waited[pod_id] += stop - self.waiting_since[pod_id]
        arrived = np.array([self.start <= p.arrival_s < self.end for p in self.pods], dtype=bool)
        return self.meter.result(
            self.policy.name, self.waited[arrived], self.classes[arrived], len(self.queue), self.fleet
        )

    def _handle(self, when: float, kind: int, subject: int, epoch: int) -> None:
        self.meter.advance(when, self.fleet, len(self.queue))
        self.last_event = when
        if kind == ARRIVE:
            self.waiting_since[subject] = when
            self._enqueue(subject)
            self._try([subject], when)
        elif kind == DEPART:
            if epoch != self.epoch[subject]:
                return  # evicted since: this departure belongs to an earlier start
            node = self.fleet.nodes[self.node_of[subject]]
            node = self.fleet.give_back(node, subject, self.demand_of[subject])
            self._loaded(node, when)
            self.node_of[subject] = -1
            self.running -= 1
            self._try(list(self.queue), when)
            self._maybe_unneeded(node, when)
        elif kind == UNNEEDED:
            # A stale check (a pod landed or a change came since: unneeded_since is NaN or later) does nothing; an
            # under-used node with pods is drained by the periodic check (_scale_down_underused).
            if (
                self.fleet.unneeded_since[subject] + self.config.scale_down_unneeded_s <= when
                and not self.fleet.nodes[subject].pods
                and subject not in self.kept
            ):
                if when < self._scale_down_resumes():
                    heapq.heappush(self.events, (self._scale_down_resumes(), UNNEEDED, subject, 0))
                else:
                    self._remove(self.fleet.nodes[subject])
                    self.meter.node_removed()
        elif subject in self.adding:  # BACK: the autoscaler added a released node back
            self.adding.discard(subject)
            self.fleet.restore(self.fleet.nodes[subject])
            self._try(list(self.queue), when)
            self._maybe_unneeded(self.fleet.nodes[subject], when)
        else:  # BACK: a reconfigured node returns with its new slots (or, released, is removed)
            node = self.fleet.nodes[subject]
            self.fleet.back(node, *self.pending_changes.pop(subject))
            if subject in self.releasing:
                self.releasing.discard(subject)
                if self.config.scale_down_unneeded_s is None and not self.config.keep_released:
                    self._remove(node)
                # else it is one more idle node, which the autoscaler (if any) removes after its unneeded time
            self._try(list(self.queue), when)
            self._maybe_unneeded(self.fleet.nodes[subject], when)

    def _remove(self, node: SimNode) -> None:
        """The autoscaler removes the node; what it adds back later is a new node in its group's configuration."""
        self.holds.pop(self.index[node.name], None)  # fleet.release lifts it
        self.fleet.release(node)
        self.fleet.renew(node, *self.group_configs[self.index[node.name]])

    def _scale_down_resumes(self) -> float:
        """When the autoscaler may remove nodes again after its last scale-up (``--scale-down-delay-after-add``)."""
        return self.last_scale_up + self.config.scale_down_delay_after_add_s

    def _idle(self, node: SimNode) -> bool:
        """Empty, taking pods, and neither removed nor about to change."""
        index = self.index[node.name]
        return (
            not node.pods
            and node.available
            and not self.fleet.released[index]
            and index not in self.pending_changes
        )

    def _maybe_unneeded(self, node: SimNode, when: float) -> None:
        """With an autoscaler for every node: an idle node is unneeded from now. The autoscaler soft-taints it
        (``DeletionCandidateOfClusterAutoscaler``, so the scheduler sends pods elsewhere while another node has
        room) and removes it after ``scale_down_unneeded_s`` unless a pod lands there first."""
        unneeded_s = self.config.scale_down_unneeded_s
        if unneeded_s is None or not self._idle(node) or self.index[node.name] in self.kept:
            return
        index = self.index[node.name]
        if np.isnan(self.fleet.unneeded_since[index]):
            self.fleet.unneeded_since[index] = when
        # Already counting (under-used before its last pod left) keeps its time.
        heapq.heappush(
            self.events, (max(when, self.fleet.unneeded_since[index] + unneeded_s), UNNEEDED, index, 0)
        )

    def _scale_down_underused(self, now: float) -> None:
        """cluster-autoscaler's scale-down of nodes in use (with ``scale_down_unneeded_s`` and a
        ``scale_down_utilization_threshold`` above 0), checked at every step: a node with pods whose GPU
        utilisation (:meth:`SimNode.gpu_utilisation`) is under the threshold and whose pods would all fit the
        other nodes in service (:meth:`_movable`) is unneeded, and soft-tainted as an empty one is; once unneeded
        for the unneeded time it is drained, its pods evicted (they requeue as a planner's evictions do), and
        removed. One node per step: the autoscaler drains one node at a time (``--max-drain-parallelism``, 1). As
        for empty nodes, none is removed within ``scale_down_delay_after_add_s`` of a scale-up."""
        unneeded_s = self.config.scale_down_unneeded_s
        threshold = self.config.scale_down_utilization_threshold
        if unneeded_s is None or threshold <= 0:
            return
        since = self.fleet.unneeded_since
        # Less the nodes this check finds unneeded, whose pods' places it takes in ``room``.
        destinations = self._destinations()
        room: dict[int, Counter[tuple[str, float]]] = {}
        drain = None
        for index, node in enumerate(self.fleet.nodes):
            if (
                not node.pods
                or index in self.kept
                or not node.available
                or self.fleet.released[index]
                or index in self.pending_changes
            ):
                continue
            if node.gpu_utilisation() >= threshold or not self._movable(node, index, destinations, room):
                since[index] = np.nan
                continue
            destinations[index] = False
            if np.isnan(since[index]):
                since[index] = now
            elif drain is None and since[index] + unneeded_s <= now and now >= self._scale_down_resumes():
                drain = node
        if drain is not None:
            self.meter.advance(now, self.fleet, len(self.queue))
            self.last_event = now
            for pod_id in list(drain.pods):
                self._evict(drain, pod_id, now, AUTOSCALER)
            self._loaded(drain, now)
            self._remove(drain)
            self.meter.node_removed()
            self._try(list(self.queue), now)

    def _maybe_needed(self, node: SimNode) -> None:
        """A pod landed on the node: if the autoscaler found it unneeded, it is needed again unless it stays under
        the utilisation threshold (with the autoscaler's scale-down of nodes in use) and its pods still fit
        elsewhere."""
        index = self.index[node.name]
        if np.isnan(self.fleet.unneeded_since[index]):
            return
        unneeded_s = self.config.scale_down_unneeded_s
        threshold = 0.0 if unneeded_s is None else self.config.scale_down_utilization_threshold
        if node.gpu_utilisation() >= threshold or not self._movable(node, index, self._destinations(), {}):
            self.fleet.unneeded_since[index] = np.nan

    def _destinations(self) -> np.ndarray:
        """Where cluster-autoscaler's simulation may move pods: the nodes in service, but not the empty ones it is
        removing."""
        emptied = np.array([not n.pods for n in self.fleet.nodes]) & ~np.isnan(self.fleet.unneeded_since)
        return self.fleet.up & ~emptied

    def _movable(
        self, node: SimNode, index: int, destinations: np.ndarray, room: dict[int, Counter[tuple[str, float]]]
    ) -> bool:
        """Whether cluster-autoscaler's simulation places every pod of the node on ``destinations`` (other than
        itself), given the free slots left in ``room`` (per node: (resource, share) -> count; filled as needed,
        and taken from only when every pod finds a place): by the resource each pod requests, ``nvidia.com/gpu``
        units on one node, or its MIG instance's ``nvidia.com/mig-*``; largest first, each on the first node in
        name order with room. A pod of ``nvidia.com/gpu`` takes MPS tenants only where its share fits one (the
        required affinity docs/planner.md gives whole-GPU pods and pods over a tenant's share); its ``gpu_spec``
        pins it to its models' nodes."""
        taken: dict[int, Counter[tuple[str, float]]] = {}
        for pod_id in sorted(node.pods, key=lambda p: -self.demand_of[p]):
            slots = node.pods[pod_id]
            resource, units = node.slots[slots[0]].resource, len(slots)
            share = self.asks[pod_id].share if resource == GPU_RESOURCE else 0.0
            allowed = destinations & self.fleet.eligible(self.asks[pod_id].models)
            allowed[index] = False
            for other in map(int, np.flatnonzero(allowed)):
                free = taken.get(other)
                if free is None:
                    if other not in room:
                        room[other] = Counter(
                            (s.resource, s.share) for s in self.fleet.nodes[other].slots if s.pod < 0
                        )
                    free = taken[other] = Counter(room[other])
                fits = sorted(
                    key
                    for key, count in free.items()
                    if count >= units and key[0] == resource and key[1] >= share - EPS
                )
                if fits:
                    free[fits[0]] -= units  # the smallest that fits
                    break
            else:
                return False
        room.update(taken)
        return True

    def _try(self, candidates: list[int], when: float) -> None:
        failed: dict[Ask, None] = {}  # an ask that did not fit cannot fit later in this pass (in queue order)
        for pod_id in candidates:
            ask = self.asks[pod_id]
            if ask in failed:
                continue
            found = self.fleet.find(ask)
            if found is None:
                failed[ask] = None
                continue
            node, slots = found
            node = self.fleet.take(node, pod_id, slots, self.demand_of[pod_id])
            self._maybe_needed(node)
            self._loaded(node, when)
            self.queue.remove(pod_id)
            self.queued_demand[self.wants[pod_id]] -= 1
            self.waited[pod_id] += when - self.waiting_since[pod_id]
            self.meter.started(when - self.waiting_since[pod_id])
            self.running += 1
            self.started_at[pod_id] = when
            self.node_of[pod_id] = self.index[node.name]
            heapq.heappush(
                self.events, (when + self.remaining[pod_id], DEPART, pod_id, int(self.epoch[pod_id]))
            )
        if failed and self.fleet.released.any():
            self._scale_up(failed, when)

    def _scale_up(self, failed: Mapping[Ask, None], when: float) -> None:
        """cluster-autoscaler's scale-up: its binpacking estimator packs the pending pods that fit no node in
        service, largest first, onto the nodes it is already adding, then onto as many released nodes as they
        still need (each the least-waste expander's choice, :meth:`ReplayFleet.to_add`), all added at once."""
        fits_now = {ask: False for ask in failed}
        stranded = []
        for pod_id in self.queue:
            ask = self.asks[pod_id]
            if ask not in fits_now:
                fits_now[ask] = self.fleet.find(ask) is not None
            if not fits_now[ask]:
                stranded.append(pod_id)
        stranded.sort(key=lambda pod_id: -self.demand_of[pod_id])  # stable: queue order among equals
        upcoming = {index: self.fleet.nodes[index].copy() for index in sorted(self.adding)}
        homeless: set[Ask] = set()  # no upcoming node and no released one hosts it: neither will later here
        for pod_id in stranded:
            ask = self.asks[pod_id]
            if ask in homeless:
                continue
            eligible = self.fleet.eligible(ask.models)
            home = next(
                (
                    (node, slots)
                    for index, node in upcoming.items()
                    if eligible[index] and (slots := node.fit(ask.gpus, ask.share)) is not None
                ),
                None,
            )
            if home is None:
                index = self.fleet.to_add(ask, upcoming)
                if index is None:
                    homeless.add(ask)  # it waits for room in service
                    continue
                self._pick_group(ask, index)
                self.adding.add(index)
                self.fleet.booting(index)
                self.meter.node_added()
                self.last_scale_up = when
                heapq.heappush(self.events, (when + self.config.scale_up_s, BACK, index, 0))
                node = upcoming[index] = self.fleet.nodes[index].copy()
                slots = node.fit(ask.gpus, ask.share)
                if slots is None:
                    raise RuntimeError(f"{node.name}: added for a pod it cannot host")
                home = (node, slots)
            home[0].place(pod_id, home[1], self.demand_of[pod_id])

    def _pick_group(self, ask: Ask, index: int) -> None:
        """Which node group the autoscaler adds the released node from: with ``shared_node_group``, for a
        fractional pod that fits an MPS tenant, the group whose nodes come up shared by MPS (``RESERVE_REPLICAS``
        tenants per GPU; cluster-autoscaler's ``priority`` expander ranks it first, and whole-GPU pods, which
        require unshared GPUs, fit only the other group). A pod that took a whole GPU of a new node for its
        fraction strands the rest of that GPU for its whole run (docs/backtest.md, "A node group shared by
        MPS"). Policies that never share GPUs have no such group; ``static-shared`` has it without a planner; with
        ``shared_node_group_max_gpus`` only the machines of at most that many GPUs have one."""
        node = self.fleet.nodes[index]
        largest = self.config.shared_node_group_max_gpus
        if (
            self.config.shared_node_group
            and (largest is None or node.gpus <= largest)
            and self.policy.shares_gpus
            and ask.gpus == 1
            and ask.share <= 1 / RESERVE_REPLICAS
            and node.mig_config == MIG_OFF
            and node.replicas == 1
            and node.model.mps_max_replicas >= RESERVE_REPLICAS
        ):
            self.fleet.renew(node, MIG_OFF, self.catalog.device_plugin_config_for(RESERVE_REPLICAS))

    def _enqueue(self, pod_id: int) -> None:
        bisect.insort(self.queue, pod_id)
        self.queued_demand[self.wants[pod_id]] += 1

    def _recent_requests(self, now: float) -> Counter[tuple[int, float]]:
        """The requests of the pods that arrived in the trailing hour: the workload fragmentation is measured
        against."""
        lo = bisect.bisect_right(self.arrivals, now - HOUR_S)
        hi = bisect.bisect_right(self.arrivals, now)
        return Counter((p.gpus, p.share) for p in self.pods[lo:hi])

    def _loaded(self, node: SimNode, when: float) -> None:
        self.history.setdefault(self.index[node.name], []).append((when, node.load / node.gpus))

    # -- hourly planning -----------------------------------------------------------------------------
    def _plan(self, now: float) -> None:
        dwell_s = self.planner.dwell_hours * HOUR_S
        quiet = (
            not self.queue
            and not self.last_plan_changed
            and now - self.last_event >= 2 * HOUR_S
            and now - self.last_change_any >= dwell_s + HOUR_S
            and not (self.policy.view == FUTURE and self.events and self.events[0][0] < now + HOUR_S)
        )
        if quiet:
            return
        plan = plan_fleet(
            self._observations(now), self._forecasts(now), self.catalog, self.planner, _moment(now), self.pins
        )
        self.meter.planned()
        self.pins = plan.pins
        self.fleet.added_last[:] = False  # the plan observes every node, released ones too
        self.fleet.added_last[[self.index[name] for name in plan.pinned_nodes]] = True
        self.fleet.taints[:] = 0
        for listed in plan.standby_grades:
            self.fleet.taints[[self.index[name] for name in listed]] += 1
        released = self._settle_holds(plan.nodes, now)
        changed = [p for p in plan.nodes if p.changes]
        for node_plan in changed:
            self.holds.pop(self.index[node_plan.node], None)  # the change lifts the hold (fleet.unavailable)
            self._reconfigure(
                self.fleet.by_name[node_plan.node],
                node_plan.desired,
                now,
                CONSOLIDATION if node_plan.rule == CONSOLIDATED else RECONFIGURATION,
            )
            if node_plan.rule == CONSOLIDATED and not node_plan.pending_served:
                self.releasing.add(self.index[node_plan.node])
        self.last_plan_changed = bool(changed)
        self._keep_from_scale_down({self.index[name] for name in plan.scale_down_disabled}, now)
        moved = self._rehome(plan.moves, now)
        if changed:
            self.last_change_any = now
        if changed or moved or released:
            self._try(list(self.queue), now)

    def _settle_holds(self, plans: Sequence[NodePlan], now: float) -> bool:
        """Hold the plan's ``cordon-to-drain`` nodes, release its ``uncordon`` ones (rollout.holds); whether a
        node was released (its free slots take pods again)."""
        released = False
        for node_plan in plans:
            index = self.index[node_plan.node]
            node = self.fleet.nodes[index]
            if node_plan.action == DRAIN:
                since = self.holds[index].since if index in self.holds else _moment(now)
                desired = node_plan.desired
                self.holds[index] = Hold(desired.mig_config, desired.device_plugin_config, since)
                if not node.held:
                    self.fleet.hold(node)
                    self.meter.held()
            elif node_plan.action == UNCORDON and index in self.holds:
                del self.holds[index]
                self.fleet.unhold(node)
                released = True
                self._maybe_unneeded(self.fleet.nodes[index], now)
        return released

    def _rehome(self, moves: Sequence[PodMove], now: float) -> bool:
        """Evict the plan's re-homed pods (planning.rehome); they requeue and the scheduler model places them."""
        for move in moves:
            node = self.fleet.by_name[move.node]
            pod_id = self.pod_ids[move.pod]
            if pod_id in node.pods:
                self._evict(node, pod_id, now, REHOME)
        return bool(moves)

    def _keep_from_scale_down(self, kept: set[int], now: float) -> None:
        """The plan's ``cluster-autoscaler.kubernetes.io/scale-down-disabled`` nodes (``planner_keep_shaped``),
        until the next plan: the autoscaler neither finds them unneeded nor removes them; a node that leaves the
        list is a candidate again from now."""
        if self.config.scale_down_unneeded_s is None:
            return
        for index in kept:
            self.fleet.unneeded_since[index] = np.nan
        left, self.kept = self.kept - kept, kept
        for index in sorted(left):
            self._maybe_unneeded(self.fleet.nodes[index], now)

    def _reconfigure(self, node: SimNode, desired: DesiredState, now: float, rule: str) -> None:
        """``rule``: why its pods are evicted (:data:`~slicewise.whatif.metrics.EVICTION_RULES`)."""
        index = self.index[node.name]
        for pod_id in list(node.pods):
            self._evict(node, pod_id, now, rule)
        self._loaded(node, now)
        drain_only = (desired.mig_config, desired.device_plugin_config) == (node.mig_config, node.plugin)
        self.fleet.unavailable(node)
        node.last_change = now
        self.pending_changes[index] = (desired.mig_config, desired.device_plugin_config)
        away = self.config.drain_s if drain_only else self.config.reconfigure_s
        heapq.heappush(self.events, (now + away, BACK, index, 0))
        if drain_only:
            self.meter.consolidated()
        else:
            self.meter.reconfigured()

    def _evict(self, node: SimNode, pod_id: int, now: float, rule: str) -> None:
        """The pod leaves the node and requeues (ahead of later arrivals) with the rest of its run time plus
        ``eviction_cost_s``."""
        self.fleet.give_back(node, pod_id, self.demand_of[pod_id])
        left = max(1.0, self.remaining[pod_id] - (now - self.started_at[pod_id]))
        self.remaining[pod_id] = left + self.config.eviction_cost_s
        self.running -= 1
        self.epoch[pod_id] += 1
        self.node_of[pod_id] = -1
        self.waiting_since[pod_id] = now
        self._enqueue(pod_id)
        self.meter.evicted(pod_id, rule)

    def _observations(self, now: float) -> list[NodeObservation]:
        out = []
        for index, node in enumerate(self.fleet.nodes):
            annotations = (
                {LAST_CHANGE_ANNOTATION: _moment(node.last_change).isoformat()}
                if node.last_change is not None
                else {}
            )
            if index in self.holds:
                annotations[HOLD_ANNOTATION] = self.holds[index].to_annotation()
            gpu_node = GpuNode(
                name=node.name,
                gpu_product=node.model.gpu_product,
                gpu_count=node.gpus,
                mig_config=node.mig_config,
                mig_config_state="success" if node.available else "pending",
                device_plugin_config=node.plugin,
                allocatable={},
                unschedulable=bool(self.fleet.released[index]) or index in self.adding or node.held,
                labels={TRACE_MODEL_LABEL: node.kind},
                annotations=annotations,
            )
            pods = tuple(
                GpuPod(
                    namespace="trace",
                    name=self.pods[pod_id].name,
                    node=node.name,
                    phase="Running",
                    requests=dict(Counter(node.slots[i].resource for i in slots)),
                    owner_kind="Job",
                    owner_name=self.pods[pod_id].name,
                    evictable=self._evictable[pod_id],
                    blockers=() if self._evictable[pod_id] else NOT_OPTED_IN[self.config.evictable],
                    share=self.pods[pod_id].share,  # a trace request is a size: declared, as by annotation
                    node_selector=self._selectors[pod_id],
                    started_at=_moment(self.started_at[pod_id]),
                )
                for pod_id, slots in node.pods.items()
            )
            out.append(NodeObservation(gpu_node, pods))
        return out

    def _forecasts(self, now: float) -> Forecasts:
        loads = self._node_loads(now)
        series: list[SeriesForecast] = []
        for index, node in enumerate(self.fleet.nodes):
            p50, upper = loads.get(index, (0.0, 0.0))
            if p50 == 0 and upper == 0:
                series.append(SeriesForecast(node.name, 0, "", "", 0.0, 0.0, 0.0))
            else:
                series += [SeriesForecast(node.name, g, "", "", p50, upper, upper) for g in range(node.gpus)]
        demand = self._demand(now)
        predictor = {NOW: "current load", FUTURE: "the true next hour"}.get(
            self.policy.view, "p90_last_hour baseline"
        )
        return Forecasts(
            series=tuple(series),
            demand=tuple(
                DemandForecast(r.resource, p50, upper, r.size, r.gpus, r.models, r.selector, latest)
                for r, (p50, upper, latest) in sorted(demand.items(), key=lambda item: item[0].label)
            ),
            predictor=predictor,
            trusted=True,
        )

    @staticmethod
    def _wants(pod: TracePod, models: FleetModels) -> Request:
        """What a waiting pod asks the planner for: its share (a trace request is a size, so any form at least that
        big hosts it), or whole GPUs, on the catalogue models its ``gpu_spec`` names and, as a node selector, the
        node-list models themselves (``TRACE_MODEL_LABEL``). Counted once."""
        allowed = {models.of(name).name for name in pod.models if name in models.by_name}
        pin = ((TRACE_MODEL_LABEL, pod.models),) if pod.models else ()
        return request_for(GPU_RESOURCE, pod.share, pod.gpus, allowed, pin)

    def _demand(self, now: float) -> dict[Request, tuple[float, float, float | None]]:
        """Pending requests per kind as the planner gets them, (P50, upper, pending now): ``now`` -> what waits
        now; ``forecast`` -> the median and P90 of the last hour's samples of what waited, and the last sample
        (the production baseline, forecasting.forecasts.pending_demand); ``future`` -> the median and P90 over the
        next hour, as it will be if nothing changes (the oracle; pending now unsaid, so whole-GPU requests count at
        the median, planning.planner.whole_pending)."""
        if self.policy.view == NOW:
            return {kind: (float(n), float(n), float(n)) for kind, n in self.queued_demand.items() if n > 0}
        future = self.policy.view == FUTURE
        samples = self._lookahead(now) if future else list(self.waiting_samples)
        kinds: set[Request] = set().union(*samples) if samples else set()
        out: dict[Request, tuple[float, float, float | None]] = {}
        for kind in kinds:
            counts = [s.get(kind, 0) for s in samples]
            latest = None if future else float(counts[-1])
            out[kind] = (float(np.median(counts)), float(np.quantile(counts, 0.9)), latest)
        return out

    def _lookahead(self, now: float) -> list[Counter[Request]]:
        """What will wait at each step of the next hour if the layout stays as it is: the replay forked (its
        fleet copied on write, the trace shared) and run forward without planning."""
        twin = copy.copy(self)
        twin.fleet = self.fleet.fork()
        twin.queue, twin.events = list(self.queue), list(self.events)
        for name in ("remaining", "waiting_since", "waited", "started_at", "epoch", "node_of"):
            setattr(twin, name, getattr(self, name).copy())
        twin.queued_demand = Counter(self.queued_demand)
        twin.pending_changes = dict(self.pending_changes)
        twin.releasing, twin.adding = set(self.releasing), set(self.adding)
        twin.history = {}
        twin.meter = Meter(now, 0)
        samples = []
        for k in range(1, int(HOUR_S // self.config.step_s) + 1):
            until = now + k * self.config.step_s
            while twin.events and twin.events[0][0] < until:
                twin._handle(*heapq.heappop(twin.events))
            twin._scale_down_underused(until)  # the autoscaler's drains, as the replay checks them every step
            samples.append(+twin.queued_demand)
        return samples

    def _node_loads(self, now: float) -> dict[int, tuple[float, float]]:
        """(P50, upper) forecast load per GPU of every node whose load was not zero all of the last hour."""
        if self.policy.view == FUTURE:
            self.history.clear()  # the oracle reads the next hour, never the past
            return self._future_loads(now)
        step = self.config.step_s
        times = now - HOUR_S + step * np.arange(1, int(HOUR_S // step) + 1)
        rows, keys = [], []
        for index, changes in self.history.items():
            # Keep the last change before the hour (its value holds at the hour's start) and the ones after.
            first = bisect.bisect_right(changes, (now - HOUR_S, math.inf)) - 1
            if first > 0:
                del changes[:first]
            values = [v for _, v in changes]
            at = np.searchsorted([t for t, _ in changes], times, side="right") - 1
            sampled = np.where(at >= 0, np.asarray(values)[np.maximum(at, 0)], 0.0)
            if sampled.any():
                rows.append(sampled)
                keys.append(index)
        if not rows:
            return {}
        if self.policy.view == NOW:
            return {k: (float(r[-1]), float(r[-1])) for k, r in zip(keys, rows, strict=True)}
        panel = np.vstack(rows)
        horizon = int(HOUR_S // step)
        p50 = mean_last_hour(panel, step_s=step, horizon_steps=horizon)[:, -1]
        upper = p90_last_hour(panel, step_s=step, horizon_steps=horizon)[:, -1]
        return {k: (float(a), float(b)) for k, a, b in zip(keys, p50, upper, strict=True)}

    def _future_loads(self, now: float) -> dict[int, tuple[float, float]]:
        """The oracle's load: the pods placed now that are still running over the next hour (mean, max)."""
        out = {}
        for index, node in enumerate(self.fleet.nodes):
            if not node.pods:
                continue
            step = self.config.step_s
            times = now + step * np.arange(1, int(HOUR_S // step) + 1)
            total = np.zeros(len(times))
            for pod_id in node.pods:
                ends = self.started_at[pod_id] + self.remaining[pod_id]
                total += np.where(times < ends, self.demand_of[pod_id], 0.0)
            per_gpu = total / node.gpus
            out[index] = (float(per_gpu.mean()), float(per_gpu.max()))
        return out


def _opted_in(pod: TracePod, evictable: str) -> bool:
    """Whether Slicewise may evict ``pod`` under ``BacktestConfig.evictable``."""
    if evictable == "best-effort":
        return pod.qos == "BE"
    return pod.opted_in if evictable == "annotated" else True


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(EPOCH.timestamp() + seconds, tz=UTC)
