"""What a backtest measures per policy, integrated over time between events.

Every replay serves the same pods: it runs past the trace's window, with no new arrivals, until every pod that
arrived has finished (or ``drain_cap_s`` after the window; ``still_waiting`` then counts the pods left), so a
policy that makes pods wait is charged for the hours it takes to serve them later.

Headline figures, what operators pay for:

- ``node_gpu_hours``: GPU-hours of the nodes hosting at least one pod — the capacity a cluster autoscaler could
  not release — to serve every pod. ``cost``: the same, each node at its GPU model's price.
- ``wait_mean_s`` / ``wait_p95_s`` / ``wait_over_5min``: each pod's total time waiting (before its start and
  after every eviction), its mean, 95th percentile and the share of pods that waited more than 5 minutes;
  overall and per size class in ``wait_by_class`` (fractional, 1 GPU, multi-GPU).
- ``gpus_releasable``: GPUs of whole nodes with no pod (not being reconfigured), time-averaged: what an
  autoscaler could have removed.
- ``reconfigs_per_node_hour``, ``consolidations``, ``pods_evicted``: layout or MPS changes applied, nodes drained
  of their pods without a change (consolidation), and the pods both evicted (``most_evictions_of_a_pod``: the
  most times one pod was; ``evictions_by_rule``: how many each rule evicted, of :data:`EVICTION_RULES`, and
  ``most_evicted_pod_by_rule``: the same for that pod); ``nodes_added``: nodes a
  consolidation released that the autoscaler added back for pods with nowhere else to go; ``holds``: nodes
  cordoned so that pods Slicewise may not evict finish (``planner_cordon_to_drain``, ``--evictable``).

Kept beside them:

- ``gpu_utilisation``: requested GPU-equivalents of the running pods over the GPUs hosting at least one pod,
  time-weighted. The trace has requests, not measured utilisation, so a pod is taken to use what it asked for;
  blind to queueing and to idle nodes, so never a verdict on its own.
- ``fragmentation``: the share of free capacity (nodes being reconfigured excluded) that cannot host a request
  of the current workload, in expectation over the requests that arrived in the trailing hour (ATC'23), sampled
  every step and averaged. On a mostly idle fleet every policy scores near 0. Not measured for ``ideal``.
- ``pending_time_share``: the share of time at least one pod waits; ``served_gpu_hours``: GPU-equivalent hours
  the pods ran (the same for every policy that served every pod).
- ``paid``: where the paid GPU-hours (``service_gpu_hours``) went, in four parts that add up to them
  (:class:`PaidSplit`): what the pods requested, what their slots held beyond it, the free capacity of the nodes
  in use (stranded: no node can go without moving pods) and the nodes in service with no pod.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

HOUR_S = 3600.0
LONG_WAIT_S = 300.0


class FleetState(Protocol):
    """What the meter reads of a fleet between events."""

    @property
    def work(self) -> float: ...  # GPU-equivalents the running pods requested
    @property
    def busy_gpus(self) -> int: ...  # physical GPUs hosting at least one pod
    @property
    def busy_node_gpus(self) -> int: ...  # GPUs of the nodes hosting at least one pod
    @property
    def busy_cost_rate(self) -> float: ...  # price per hour of those GPUs
    @property
    def releasable_gpus(self) -> int: ...
    # GPUs of the nodes the cluster pays for (not removed by an autoscaler)
    @property
    def service_gpus(self) -> int: ...
    # GPU-equivalents of what the running pods hold: their slots (a whole GPU, a MIG slice, an MPS tenant), at
    # least what they requested
    @property
    def taken(self) -> float: ...


@dataclass(frozen=True)
class HourRecord:
    start_s: float
    utilisation: float  # of the GPUs in use, over the hour
    gpus_in_use: float  # GPUs of the nodes hosting pods, mean over the hour (node-GPU-hours per hour)
    waiting: float  # pods waiting, mean over the hour
    reconfigs: int
    wait_mean_s: float  # mean wait of the pods that started (or restarted) in the hour; NaN for none


@dataclass(frozen=True)
class ClassWait:
    pods: int
    mean_s: float
    p95_s: float
    over_5min: float


def class_wait(waited: np.ndarray) -> ClassWait:
    if not len(waited):
        return ClassWait(0, 0.0, 0.0, 0.0)
    return ClassWait(
        len(waited),
        float(waited.mean()),
        float(np.percentile(waited, 95)),
        float((waited > LONG_WAIT_S).mean()),
    )


# Who evicts a pod in a replay: a change of MIG layout or MPS replicas (the node is drained first), a
# consolidation's drain (planning.consolidation), a fractional pod re-homed to a free MPS tenant
# (planning.rehome), and the autoscaler draining a node in use under its utilisation threshold.
RECONFIGURATION, CONSOLIDATION, REHOME, AUTOSCALER = (
    "reconfiguration",
    "consolidation",
    "rehome",
    "autoscaler",
)
EVICTION_RULES = (RECONFIGURATION, CONSOLIDATION, REHOME, AUTOSCALER)


@dataclass(frozen=True)
class PaidSplit:
    """Where the paid GPU-hours went (GPU-hours; the four add up to ``service_gpu_hours``)."""

    requested: float  # what the running pods asked for (``served_gpu_hours``)
    slot_slack: float  # held beyond the request: a 0.3-GPU pod on a whole GPU or on a half-GPU tenant
    free_in_use: float  # free capacity on the nodes hosting pods: stranded, since none of them can go
    no_pods: float  # nodes in service with no pod: idle, kept ready, being reconfigured, or not yet removed

    def parts(self) -> tuple[float, float, float, float]:
        """The four parts, in the order the report prints them."""
        return (self.requested, self.slot_slack, self.free_in_use, self.no_pods)

    def shares(self) -> tuple[float, float, float, float]:
        """Each part as a share of the paid GPU-hours (zeros when nothing was paid)."""
        parts = self.parts()
        total = sum(parts)
        if total <= 0:
            return (0.0, 0.0, 0.0, 0.0)
        requested, slack, free, no_pods = (part / total for part in parts)
        return (requested, slack, free, no_pods)


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    node_gpu_hours: float
    wait_mean_s: float
    wait_p95_s: float
    wait_over_5min: float
    wait_by_class: dict[str, ClassWait]
    gpus_releasable: float
    reconfigs_per_node_hour: float
    consolidations: int
    pods_evicted: int
    gpu_utilisation: float
    cost: float
    fragmentation: float | None  # None where not measured (ideal)
    pending_time_share: float
    served_gpu_hours: float
    pods: int
    still_waiting: int
    planner_runs: int
    end_s: float  # when the replay ended: the window's end, or later while pods were still to be served
    allocated_at_end: float  # GPU-equivalents the running pods requested when it ended (saturation mode)
    nodes_added: int = 0  # released nodes the autoscaler added back (engine)
    nodes_removed: int = 0  # nodes the autoscaler removed once unneeded (engine, scale_down_unneeded_s)
    holds: int = 0  # nodes cordoned so that their pods finish (planner_cordon_to_drain; planning.holds)
    # the most times one pod was evicted: many evictions of a few pods (one moved back and forth every hour) read
    # differently from one each of many
    most_evictions_of_a_pod: int = 0
    evictions_by_rule: dict[str, int] = field(default_factory=dict)  # every rule of EVICTION_RULES, 0 or more
    most_evicted_pod_by_rule: dict[str, int] = field(default_factory=dict)  # the rules that evicted that pod
    # GPU-hours of the nodes in service (not removed by the autoscaler): what the cluster pays for; ideal's and
    # sharing's are their node_gpu_hours, or with the replays' autoscaler the node-GPUs they held over its
    # unneeded time (whatif.held)
    service_gpu_hours: float = 0.0
    paid: PaidSplit = PaidSplit(0.0, 0.0, 0.0, 0.0)
    hours: list[HourRecord] = field(default_factory=list, repr=False)

    def headline(self) -> dict[str, Any]:
        """The figures of ``--json`` (rounded; no time series)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("policy", "hours")}
        return _rounded(out)


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(float(value), 6) if isinstance(value, float) else value


class Meter:
    def __init__(self, start_s: float, nodes: int):
        self.last = start_s
        self.start = start_s
        self.nodes = nodes
        self.work = self.busy_gpus = self.node_gpus = self.cost = self.releasable = 0.0  # integrals (x s)
        self.service = self.taken = 0.0
        self.frag = self.waiting_time = 0.0
        self.frag_samples = 0
        self.reconfigs = self.plans = self.consolidations = self.added = self.removed = self.holds = 0
        self.evictions_of: Counter[tuple[int, str]] = Counter()  # (pod, rule) -> times
        self.hour = self._empty_hour()
        self.hour_start = start_s
        self.hours: list[HourRecord] = []

    @staticmethod
    def _empty_hour() -> dict[str, float]:
        return {
            "work": 0.0,
            "busy": 0.0,
            "nodes": 0.0,
            "queue": 0.0,
            "reconfigs": 0,
            "started": 0,
            "wait": 0.0,
        }

    def advance(self, when: float, fleet: FleetState, waiting: int) -> None:
        """Integrate the state held since the last call up to ``when``."""
        dt = when - self.last
        if dt <= 0:
            return
        self.last = when
        self.work += fleet.work * dt
        self.busy_gpus += fleet.busy_gpus * dt
        self.node_gpus += fleet.busy_node_gpus * dt
        self.cost += fleet.busy_cost_rate * dt
        self.releasable += fleet.releasable_gpus * dt
        self.service += fleet.service_gpus * dt
        self.taken += fleet.taken * dt
        self.hour["work"] += fleet.work * dt
        self.hour["busy"] += fleet.busy_gpus * dt
        self.hour["nodes"] += fleet.busy_node_gpus * dt
        self.hour["queue"] += waiting * dt
        if waiting:
            self.waiting_time += dt

    def sample_fragmentation(self, value: float | None) -> None:
        if value is not None:
            self.frag += value
            self.frag_samples += 1

    def started(self, waited_s: float) -> None:
        """A pod (re)started after waiting ``waited_s`` since it last queued."""
        self.hour["started"] += 1
        self.hour["wait"] += waited_s

    def close_hour(self, when: float) -> None:
        span = when - self.hour_start
        if span <= 0:
            return
        h = self.hour
        self.hours.append(
            HourRecord(
                self.hour_start,
                h["work"] / h["busy"] if h["busy"] else 0.0,
                h["nodes"] / span,
                h["queue"] / span,
                int(h["reconfigs"]),
                h["wait"] / h["started"] if h["started"] else float("nan"),
            )
        )
        self.hour = self._empty_hour()
        self.hour_start = when

    def planned(self) -> None:
        self.plans += 1

    def reconfigured(self) -> None:
        self.reconfigs += 1
        self.hour["reconfigs"] += 1

    def consolidated(self) -> None:
        """A node drained of its pods without a change of configuration (planning.consolidation)."""
        self.consolidations += 1

    def held(self) -> None:
        """A node cordoned so that its pods finish (planning.holds)."""
        self.holds += 1

    def evicted(self, pod_id: int, rule: str) -> None:
        """``rule``: one of :data:`EVICTION_RULES`."""
        if rule not in EVICTION_RULES:
            raise ValueError(f"unknown eviction rule {rule!r}; known: {', '.join(EVICTION_RULES)}")
        self.evictions_of[pod_id, rule] += 1

    @property
    def evictions_by_pod(self) -> Counter[int]:
        """Evictions per pod, pods in the order of their first eviction."""
        out: Counter[int] = Counter()
        for (pod_id, _), times in self.evictions_of.items():
            out[pod_id] += times
        return out

    def evictions_by_rule(self) -> dict[str, int]:
        """Evictions per rule, every rule listed (0 where it evicted none)."""
        out = dict.fromkeys(EVICTION_RULES, 0)
        for (_, rule), times in self.evictions_of.items():
            out[rule] += times
        return out

    def most_evicted_pod_by_rule(self) -> dict[str, int]:
        """The rules that evicted the pod evicted most often (the first such pod), and how often each did."""
        if not self.evictions_of:
            return {}
        [(pod_id, _)] = self.evictions_by_pod.most_common(1)
        return {rule: times for (pod, rule), times in self.evictions_of.items() if pod == pod_id}

    @property
    def evictions(self) -> int:
        return self.evictions_of.total()

    def node_added(self) -> None:
        """The autoscaler added back a released node."""
        self.added += 1

    def node_removed(self) -> None:
        """The autoscaler removed a node it found unneeded (``BacktestConfig.scale_down_unneeded_s``)."""
        self.removed += 1

    def result(
        self, policy: str, waited: np.ndarray, classes: np.ndarray, still_waiting: int, fleet: FleetState
    ) -> PolicyResult:
        """``waited`` and ``classes``: each pod's total wait and size class; ``fleet`` as the replay ended."""
        span = max(self.last - self.start, 1.0)
        overall = class_wait(waited)
        by_class = {str(c): class_wait(waited[classes == c]) for c in dict.fromkeys(classes.tolist())}
        return PolicyResult(
            policy=policy,
            node_gpu_hours=float(self.node_gpus / HOUR_S),
            wait_mean_s=overall.mean_s,
            wait_p95_s=overall.p95_s,
            wait_over_5min=overall.over_5min,
            wait_by_class=by_class,
            gpus_releasable=float(self.releasable / span),
            reconfigs_per_node_hour=self.reconfigs / (self.nodes * span / HOUR_S) if self.nodes else 0.0,
            consolidations=self.consolidations,
            pods_evicted=self.evictions,
            gpu_utilisation=float(self.work / self.busy_gpus) if self.busy_gpus else 0.0,
            cost=float(self.cost / HOUR_S),
            fragmentation=self.frag / self.frag_samples if self.frag_samples else 0.0,
            pending_time_share=self.waiting_time / span,
            served_gpu_hours=float(self.work / HOUR_S),
            pods=len(waited),
            still_waiting=still_waiting,
            planner_runs=self.plans,
            end_s=self.last,
            allocated_at_end=float(fleet.work),
            nodes_added=self.added,
            nodes_removed=self.removed,
            holds=self.holds,
            most_evictions_of_a_pod=max(self.evictions_by_pod.values(), default=0),
            evictions_by_rule=self.evictions_by_rule(),
            most_evicted_pod_by_rule=self.most_evicted_pod_by_rule(),
            service_gpu_hours=float(self.service / HOUR_S),
            paid=PaidSplit(
                requested=float(self.work / HOUR_S),
                slot_slack=float((self.taken - self.work) / HOUR_S),
                free_in_use=float((self.node_gpus - self.taken) / HOUR_S),
                no_pods=float((self.service - self.node_gpus) / HOUR_S),
            ),
            hours=self.hours,
        )
