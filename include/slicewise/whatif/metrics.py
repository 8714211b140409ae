"""What a backtest measures per policy, integrated over time between events.

- ``gpu_utilisation``: requested GPU-equivalents of the running pods over the GPUs hosting at least one pod,
  time-weighted (allocation-weighted: a GPU counts while something is allocated on it). The trace has requests,
  not measured utilisation, so a pod is taken to use what it asked for.
- ``pending_mean_s`` / ``pending_p95_s``: each pod's total time waiting (before its start and after every
  eviction); pods still waiting at the end count until the end.
- ``fragmentation``: the share of free capacity (GPU-equivalents; nodes being reconfigured excluded) that
  cannot host a request of the current workload — in expectation over the requests that arrived in the
  trailing hour, as "Beware of Fragmentation" (ATC'23) defines it for a workload — sampled every step and
  averaged. (Against the smallest *waiting* request, as first specified, it is 100 % by construction whenever
  a one-GPU pod waits: first fit would have placed it on any free slot big enough.)
- ``pending_time_share``: the share of time at least one pod waits.
- ``reconfigs_per_node_hour``, ``pods_evicted``: layout or MPS changes applied and pods they evicted.
- ``gpu_hours`` / ``cost``: GPU-hours of the nodes hosting at least one pod — the capacity a cluster autoscaler
  could not release — times the modelled GPU's price.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from slicewise.whatif.fleet import Fleet

HOUR_S = 3600.0


@dataclass(frozen=True)
class HourRecord:
    start_s: float
    utilisation: float  # of the GPUs in use, over the hour
    gpus_in_use: float  # GPUs of the nodes hosting pods, mean over the hour
    waiting: float  # pods waiting, mean over the hour
    reconfigs: int


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    gpu_utilisation: float
    pending_mean_s: float
    pending_p95_s: float
    fragmentation: float
    pending_time_share: float
    reconfigs_per_node_hour: float
    pods_evicted: int
    gpu_hours: float
    cost: float
    pods: int
    still_waiting: int
    planner_runs: int
    hours: list[HourRecord] = field(default_factory=list, repr=False)

    def headline(self) -> dict[str, Any]:
        """The figures of ``--json`` (rounded; no time series)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("policy", "hours")}
        return {k: round(float(v), 6) if isinstance(v, float) else v for k, v in out.items()}


class Meter:
    def __init__(self, start_s: float, nodes: int):
        self.last = start_s
        self.start = start_s
        self.nodes = nodes
        self.work = self.busy_gpus = self.node_gpus = 0.0  # integrals (unit x seconds)
        self.frag = self.waiting_time = 0.0
        self.frag_samples = 0
        self.reconfigs = self.evictions = self.plans = 0
        self.hour = {"work": 0.0, "busy": 0.0, "nodes": 0.0, "queue": 0.0, "reconfigs": 0}
        self.hour_start = start_s
        self.hours: list[HourRecord] = []

    def advance(self, when: float, fleet: Fleet, waiting: int) -> None:
        """Integrate the state held since the last call up to ``when``."""
        dt = when - self.last
        if dt <= 0:
            return
        self.last = when
        self.work += fleet.work * dt
        self.busy_gpus += fleet.busy_gpus * dt
        self.node_gpus += fleet.busy_node_gpus * dt
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
            )
        )
        self.hour = {"work": 0.0, "busy": 0.0, "nodes": 0.0, "queue": 0.0, "reconfigs": 0}
        self.hour_start = when

    def planned(self) -> None:
        self.plans += 1

    def reconfigured(self) -> None:
        self.reconfigs += 1
        self.hour["reconfigs"] += 1

    def evicted(self) -> None:
        self.evictions += 1

    def result(self, policy: str, waited: np.ndarray, still_waiting: int, price: float) -> PolicyResult:
        span_h = max(self.last - self.start, 1.0) / HOUR_S
        gpu_hours = self.node_gpus / HOUR_S
        return PolicyResult(
            policy=policy,
            gpu_utilisation=float(self.work / self.busy_gpus) if self.busy_gpus else 0.0,
            pending_mean_s=float(waited.mean()) if len(waited) else 0.0,
            pending_p95_s=float(np.percentile(waited, 95)) if len(waited) else 0.0,
            fragmentation=self.frag / self.frag_samples if self.frag_samples else 0.0,
            pending_time_share=self.waiting_time / max(self.last - self.start, 1.0),
            reconfigs_per_node_hour=self.reconfigs / (self.nodes * span_h) if self.nodes else 0.0,
            pods_evicted=self.evictions,
            gpu_hours=float(gpu_hours),
            cost=float(gpu_hours * price),
            pods=len(waited),
            still_waiting=still_waiting,
            planner_runs=self.plans,
            hours=self.hours,
        )
