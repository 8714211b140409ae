"""Benchmark: what holds ``packing``'s node-GPU-hour cut back, by lifting the planner's limits one at a time.

    .venv/bin/python benchmarks/planner_limits.py       # both tables, about 2 min

On the four first-fit samples of ``benchmarks/backtest.py`` with ``planner_consolidation=nodes``, ``packing``
is replayed with more of its limits lifted on each row (in the planner and in the replay alike):

1. as shipped (``planner_release_below`` 0.5, ``planner_release_below_large`` 0.25 for nodes of 8 GPUs or more);
2. any node whose pods fit elsewhere may be emptied and released (``release_below`` and ``release_below_large`` 1);
3. ... and no hourly change budget (``max_change_share`` 1) and no dwell time;
4. ... and evictions free: no eviction cost, no drain time, no hysteresis (``min_gain_gpu_hours`` 0).

Then, as shipped, but from a fleet whose every node starts shared by MPS (2 or 4 tenants per GPU) instead of
whole GPUs: how much the planner's end state depends on where the fleet starts.

Each cell: share of ``ideal``'s node-GPU-hour cut vs ``static``, mean wait vs ``static``, pods evicted.
Figures and the reading of them: docs/backtest.md, "What holds the node-GPU-hours back". Reads the traces from
../shared/data/traces (exits 0 with a message when they are absent). Asserts nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from backtest import SAMPLES, TRACES

from slicewise.catalog import load_catalog
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.policies import MIG_OFF, POLICIES
from slicewise.whatif.report import format_table
from slicewise.whatif.run import replay
from slicewise.whatif.trace import PodTrace, TraceNode, hostable_on, load_nodes, load_pods, spread_sample

LIFTED: dict[str, dict[str, Any]] = {
    "shipped (release_below 0.5, 0.25 from 8 GPUs)": {},
    "any node that fits elsewhere (release_below 1)": {"release_below": 1.0, "release_below_large": 1.0},
    "... no change budget, no dwell": {
        "release_below": 1.0,
        "release_below_large": 1.0,
        "max_change_share": 1.0,
        "dwell_hours": 0.0,
    },
    "... free evictions, no hysteresis": {
        "release_below": 1.0,
        "release_below_large": 1.0,
        "max_change_share": 1.0,
        "dwell_hours": 0.0,
        "eviction_cost_s": 0.0,
        "min_gain_gpu_hours": 0.0,
    },
}
STARTS = ("mps-2", "mps-4")  # device-plugin configs every node starts with in the second table


def lifted(base: BacktestConfig, planner: dict[str, Any]) -> BacktestConfig:
    config = dataclasses.replace(base, planner=dataclasses.replace(base.planner, **planner))
    if planner.get("eviction_cost_s") == 0.0:
        config = dataclasses.replace(config, eviction_cost_s=0.0, drain_s=0.0)
    return config


def cell(result: PolicyResult, static: PolicyResult, ideal: PolicyResult) -> str:
    room = static.node_gpu_hours - ideal.node_gpu_hours
    share = (static.node_gpu_hours - result.node_gpu_hours) / room if room > 0 else float("nan")
    wait = result.wait_mean_s / static.wait_mean_s - 1 if static.wait_mean_s > 0 else float("nan")
    return f"{share:.0%} / {wait:+.0%} / {result.pods_evicted:,}"


def started_shared(
    trace: PodTrace,
    sample: Sequence[TraceNode],
    config: BacktestConfig,
    window: tuple[float, float],
    plugin: str,
) -> PolicyResult:
    initial = [(MIG_OFF, plugin)] * len(sample)
    return Replay(
        POLICIES["packing"], trace.pods, list(sample), load_catalog(), config, window, initial
    ).run()


def main() -> int:
    if not (TRACES / "alibaba_v2023_openb_node_list_gpu_node.csv").exists():
        print(f"traces absent: {TRACES} (they live in ../shared/data/traces); nothing measured")
        return 0
    began = time.perf_counter()
    nodes = load_nodes(TRACES / "alibaba_v2023_openb_node_list_gpu_node.csv")
    base = BacktestConfig.priced()
    base = dataclasses.replace(base, planner=dataclasses.replace(base.planner, consolidation="nodes"))
    limits = [["limits lifted", *SAMPLES]] + [[name] for name in LIFTED]
    starts = [["every node starts", *SAMPLES], ["whole GPUs (as shipped)"], *([plugin] for plugin in STARTS)]
    for variant, node_share in SAMPLES.items():
        sample = spread_sample(nodes, node_share)
        trace = hostable_on(load_pods(TRACES / f"alibaba_v2023_openb_pod_list_{variant}.csv"), sample)
        window = (min(p.arrival_s for p in trace.pods), trace.end_s)
        static = replay(POLICIES["static"], trace, sample, base, window)
        ideal = replay(POLICIES["ideal"], trace, sample, base, window)
        for row, planner in zip(limits[1:], LIFTED.values(), strict=True):
            result = replay(POLICIES["packing"], trace, sample, lifted(base, planner), window)
            row.append(cell(result, static, ideal))
        starts[1].append(limits[1][-1])
        for row, plugin in zip(starts[2:], STARTS, strict=True):
            row.append(cell(started_shared(trace, sample, base, window, plugin), static, ideal))
        print(f"{variant}: done, {time.perf_counter() - began:.0f} s", flush=True)
    print(
        "\nshare of ideal's node-GPU-hour cut / mean wait vs static / pods evicted; first-fit, consolidation nodes"
    )
    print(format_table(limits))
    print()
    print(format_table(starts))
    print(f"\n{time.perf_counter() - began:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
