"""Run a backtest: every policy on the same trace and fleet, in parallel processes, then compare them."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.policies import POLICIES, Policy
from slicewise.whatif.trace import PodTrace, TraceNode

BASELINE, UPPER_BOUND = "static", "oracle"
#: An oracle gain smaller than this (1 point, or 1 %) is noise: no "share of the oracle's gain" is given.
MEANINGFUL = 0.01


@dataclass(frozen=True)
class Backtest:
    pods: str  # where the pods came from: a CSV path or the Prometheus URL
    nodes: str
    trace: PodTrace
    fleet: list[TraceNode]
    config: BacktestConfig
    window: tuple[float, float]
    results: dict[str, PolicyResult]
    seconds: float

    def gains(self) -> dict[str, dict[str, float | None]]:
        """Per policy, over ``static``: utilisation points gained, relative cut in mean pending time and in
        GPU-hours, and the share of the oracle's gain each reaches (None without a baseline, an oracle, or
        an oracle gain to compare with)."""
        base, best = self.results.get(BASELINE), self.results.get(UPPER_BOUND)
        out: dict[str, dict[str, float | None]] = {}
        for name, result in self.results.items():
            row: dict[str, float | None] = {}
            for metric, gain in GAINS.items():
                mine = gain(base, result) if base else None
                top = gain(base, best) if base and best else None
                row[f"{metric}_vs_static"] = mine
                row[f"{metric}_share_of_oracle"] = (
                    mine / top if mine is not None and top is not None and abs(top) >= MEANINGFUL else None
                )
            out[name] = row
        return out


def _relative_cut(before: float, after: float) -> float | None:
    return (before - after) / before if before > 0 else None


#: How much better than ``static`` a policy is, per metric (positive = better).
GAINS: dict[str, Callable[[PolicyResult, PolicyResult], float | None]] = {
    "utilisation_points": lambda base, r: r.gpu_utilisation - base.gpu_utilisation,
    "pending_cut": lambda base, r: _relative_cut(base.pending_mean_s, r.pending_mean_s),
    "gpu_hours_cut": lambda base, r: _relative_cut(base.gpu_hours, r.gpu_hours),
}


def _replay(
    policy: Policy,
    trace: PodTrace,
    fleet: list[TraceNode],
    config: BacktestConfig,
    window: tuple[float, float],
) -> PolicyResult:
    from slicewise.catalog import load_catalog

    return Replay(policy, trace.pods, fleet, load_catalog(), config, window).run()


def run_policies(
    policies: list[Policy],
    trace: PodTrace,
    fleet: list[TraceNode],
    config: BacktestConfig,
    window: tuple[float, float],
    workers: int | None = None,
) -> dict[str, PolicyResult]:
    """Each policy's result, in the order given; policies run in separate processes (one per core)."""
    workers = max(1, min(len(policies), workers or os.cpu_count() or 1))
    if workers == 1:
        return {p.name: _replay(p, trace, fleet, config, window) for p in policies}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {p.name: pool.submit(_replay, p, trace, fleet, config, window) for p in policies}
        return {name: future.result() for name, future in futures.items()}


def known_policies() -> str:
    return ",".join(POLICIES)
