"""Saturation mode (ATC'23's workload inflation): how much of the fleet each policy can allocate.

Pods are drawn at random (seeded) from the trace's requests — sizes and ``gpu_spec`` as they are; a request no
node of the fleet could ever host is left out — and arrive one every ``interval_s``, never to leave, until the
requests that arrived add up to the fleet's GPUs ("arrived workload = 100 %"). Every policy sees the same pods.
``settle_s`` after the last arrival (time for the planners to act on the full queue) the **allocated share** is
the requested GPU-equivalents of the running pods over the fleet's GPUs: what fragmentation and rigid layouts
leave unallocated while pods wait. ``ideal`` reaches 100 % unless whole-GPU pods are left without a free node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.trace import PodTrace, TraceNode, TracePod, hostable

NEVER = 1e15  # seconds: a saturation pod never leaves
DEFAULT_INTERVAL_S = 60.0
DEFAULT_SETTLE_S = 3 * 3600.0


@dataclass(frozen=True)
class Saturation:
    trace: PodTrace  # the inflated pods
    window: tuple[float, float]
    config: BacktestConfig  # the caller's, with no drain (the pods never leave)
    gpus: int

    def allocated_share(self, result: PolicyResult) -> float:
        return result.allocated_at_end / self.gpus if self.gpus else 0.0


def inflate(
    trace: PodTrace,
    nodes: list[TraceNode],
    config: BacktestConfig,
    seed: int = 0,
    interval_s: float = DEFAULT_INTERVAL_S,
    settle_s: float = DEFAULT_SETTLE_S,
) -> Saturation:
    """The saturation workload for ``nodes``: ValueError when no request of the trace fits any node."""
    pool = [p for p in trace.pods if hostable(p, nodes)]
    if not pool:
        raise ValueError("no request of the trace fits a node of this fleet")
    gpus = sum(n.gpus for n in nodes)
    rng = np.random.default_rng(seed)
    pods: list[TracePod] = []
    arrived = 0.0
    while arrived < gpus:
        drawn = pool[int(rng.integers(len(pool)))]
        at = len(pods) * interval_s
        pods.append(replace(drawn, name=f"{drawn.name}#{len(pods)}", arrival_s=at, duration_s=NEVER))
        arrived += drawn.gpus * drawn.share
    notes = (
        f"saturation: {len(pods):,} pods drawn (seed {seed}) from {len(pool):,} hostable requests, one every "
        f"{interval_s:g} s, until {arrived:,.1f} GPU-equivalents arrived on {gpus:,} GPUs; measured "
        f"{settle_s:g} s after the last",
    )
    end = pods[-1].arrival_s + settle_s
    return Saturation(PodTrace(tuple(pods), notes), (0.0, end), replace(config, drain_cap_s=0.0), gpus)
