"""Run a backtest: every policy on the same trace and fleet, in parallel processes, then compare them."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.ideal import IdealReplay
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.node_modes import IdealModesReplay, ModesReplay
from slicewise.whatif.policies import IDEAL, IDEAL_MODES, SHARING, SHARING_FORMS, SHARING_MODES, Policy
from slicewise.whatif.sharing import FormsReplay, SharingReplay
from slicewise.whatif.trace import PodTrace, TraceNode

BASELINE, BOUND = "static", IDEAL
#: A cut by ``ideal`` smaller than this (1 %) is noise: no "share of the way to ideal" is given.
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
    notes: tuple[str, ...] = ()  # how the fleet was modelled (GPU models, assumptions)

    def gains(self) -> dict[str, dict[str, float | None]]:
        """Per policy, over ``static``: the relative cut in mean wait and in node-GPU-hours, and each as its
        share of the way from ``static`` to ``ideal`` (None without a baseline, an ``ideal`` run, or a cut by
        ``ideal`` to compare with; for node-GPU-hours, None too when the policy left pods unserved)."""
        base, best = self.results.get(BASELINE), self.results.get(BOUND)
        out: dict[str, dict[str, float | None]] = {}
        for name, result in self.results.items():
            row: dict[str, float | None] = {}
            for metric, figure in GAINS.items():
                # Node-GPU-hours compare only between replays that served the same pods.
                comparable = metric != "node_gpu_hours_cut" or not result.still_waiting
                mine = _relative_cut(figure(base), figure(result)) if base and comparable else None
                top = _relative_cut(figure(base), figure(best)) if base and best else None
                row[f"{metric}_vs_static"] = mine
                row[f"{metric}_share_of_ideal"] = (
                    mine / top if mine is not None and top is not None and top >= MEANINGFUL else None
                )
            out[name] = row
        return out


def _relative_cut(before: float, after: float) -> float | None:
    return (before - after) / before if before > 0 else None


#: The figures whose cut from ``static`` toward ``ideal`` is reported (lower is better for each).
GAINS: dict[str, Callable[[PolicyResult], float]] = {
    "wait_cut": lambda r: r.wait_mean_s,
    "node_gpu_hours_cut": lambda r: r.node_gpu_hours,
}


def replay(
    policy: Policy,
    trace: PodTrace,
    fleet: list[TraceNode],
    config: BacktestConfig,
    window: tuple[float, float],
) -> PolicyResult:
    from slicewise.catalog import load_catalog

    reference = {
        IDEAL: IdealReplay,
        SHARING: SharingReplay,
        SHARING_FORMS: FormsReplay,
        SHARING_MODES: ModesReplay,
        IDEAL_MODES: IdealModesReplay,
    }.get(policy.name)
    if reference is not None:
        return reference(trace.pods, fleet, load_catalog(), config, window).run()
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
        return {p.name: replay(p, trace, fleet, config, window) for p in policies}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {p.name: pool.submit(replay, p, trace, fleet, config, window) for p in policies}
        return {name: future.result() for name, future in futures.items()}
