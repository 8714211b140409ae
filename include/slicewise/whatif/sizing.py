"""Sizing mode: the smallest fleet on which each policy keeps the mean wait at or under a target.

The fleet a policy lets you buy. For each policy, a bisection on the number of nodes: ``n`` nodes evenly spread
over the node list (as ``--node-share`` samples them, so the mix of models and sizes is kept), the whole trace
replayed on each. Waiting is not strictly monotone in the sample (another ``n`` picks other nodes), so the answer
is the smallest ``n`` the bisection found that meets the target, checked by a replay at that ``n``; every probe
is reported.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.policies import Policy
from slicewise.whatif.trace import PodTrace, TraceNode, spread_count

DEFAULT_TARGET_S = 300.0


@dataclass(frozen=True)
class Sizing:
    policy: str
    target_s: float
    nodes: int | None  # None: even every node waits longer than the target
    gpus: int | None
    share: float | None  # of the node list
    wait_mean_s: float  # at the answer (or with every node)
    probes: tuple[tuple[int, float], ...]  # (nodes, mean wait) of every replay


Replayer = Callable[[Policy, PodTrace, list[TraceNode], BacktestConfig, tuple[float, float]], PolicyResult]


def smallest_fleet(
    policy: Policy,
    trace: PodTrace,
    nodes: list[TraceNode],
    config: BacktestConfig,
    window: tuple[float, float],
    target_s: float,
    replay: Replayer,
) -> Sizing:
    probes: dict[int, float] = {}

    def meets(count: int) -> bool:
        if count not in probes:
            probes[count] = replay(policy, trace, spread_count(nodes, count), config, window).wait_mean_s
        return probes[count] <= target_s

    total = len(nodes)
    if not meets(total):
        return Sizing(policy.name, target_s, None, None, None, probes[total], tuple(sorted(probes.items())))
    low, high = 0, total  # low fails (no nodes), high meets
    while high - low > 1:
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle
    picked = spread_count(nodes, high)
    return Sizing(
        policy.name,
        target_s,
        high,
        sum(n.gpus for n in picked),
        high / total,
        probes[high],
        tuple(sorted(probes.items())),
    )


def size_policies(
    policies: list[Policy],
    trace: PodTrace,
    nodes: list[TraceNode],
    config: BacktestConfig,
    window: tuple[float, float],
    target_s: float,
    replay: Replayer,
    workers: int | None = None,
) -> list[Sizing]:
    """Each policy's smallest fleet, in the order given; one process per policy (up to one per core)."""
    workers = max(1, min(len(policies), workers or os.cpu_count() or 1))
    args = (trace, nodes, config, window, target_s, replay)
    if workers == 1:
        return [smallest_fleet(p, *args) for p in policies]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(smallest_fleet, p, *args) for p in policies]
        return [future.result() for future in futures]
