"""Benchmark: where a policy's node-GPU-hours go — by the node's sharing mode and by how full it is.

    PYTHONPATH=include:benchmarks:. .venv/bin/python benchmarks/node_hours_by_load.py gpushare100 --node-offset 0
    PYTHONPATH=include:benchmarks:. .venv/bin/python benchmarks/node_hours_by_load.py default --fleet spread

A node in use counts all its GPUs (what an autoscaler cannot remove), however little it holds, so the
node-GPU-hours ``ideal`` saves are mostly on nodes that hold little. This replays one sample of a variant
(``benchmarks/backtest.py``'s node share, ``--node-offset``) on one of its fleets and prints, per policy, the
node-GPU-hours of nodes in use split by mode (whole GPUs, MPS, MIG) and by the share of their GPUs the pods on
them requested (at most a quarter, half, three quarters, more), with the mean pods per node in use: the rows say
whether the hours a policy loses to ``ideal`` sit on nearly empty nodes (pods that should have gone elsewhere or
moved) or on full ones (pods that could not pair). Reads the traces from ../shared/data/traces (exits 0 with a
message when they are absent). Asserts nothing; figures and their reading: docs/backtest.md, "Not the forms of
sharing".
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from backtest import SAMPLES, TRACES, fleets
from backtest_samples import load_sample

from slicewise.catalog import load_catalog
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.fleet import EPS, WHOLE, ReplayFleet
from slicewise.whatif.metrics import FleetState, Meter
from slicewise.whatif.policies import IDEAL, POLICIES, SHARING, SHARING_FORMS

BANDS = ((0.25, "<= 1/4"), (0.5, "<= 1/2"), (0.75, "<= 3/4"), (float("inf"), "> 3/4"))
FLEETS = {
    "first-fit": "as listed, first-fit",
    "spread": "as listed, Kubernetes' default spreading",
    "binpack": "as listed, the bin-packing profile",
    "a100": "as A100-80GB, first-fit",
}


class LoadMeter(Meter):
    """The replay's meter, also integrating the GPUs of each node in use by (mode, load band), in hours."""

    def __init__(self, start_s: float, nodes: int):
        super().__init__(start_s, nodes)
        self.by_load: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.node_hours: defaultdict[str, float] = defaultdict(float)
        self.pod_hours: defaultdict[str, float] = defaultdict(float)

    def advance(self, when: float, fleet: FleetState, waiting: int) -> None:
        hours = (when - self.last) / 3600
        if hours > 0 and isinstance(fleet, ReplayFleet):
            for node in fleet.nodes:
                if not node.pods:
                    continue
                mig = any(slot.share < WHOLE - EPS for slot in node.slots)
                mode = "MPS" if node.replicas > 1 else "MIG" if mig else "whole"
                band = next(name for limit, name in BANDS if node.load / node.gpus <= limit)
                self.by_load[(mode, band)] += node.gpus * hours
                self.node_hours[mode] += hours
                self.pod_hours[mode] += len(node.pods) * hours
        super().advance(when, fleet, waiting)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("variant", choices=sorted(SAMPLES))
    parser.add_argument("--node-offset", type=int, default=0)
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="first-fit")
    parser.add_argument("--policies", default="static,packing", help="of the planner policies and static")
    args = parser.parse_args()
    names = args.policies.split(",")
    if unknown := [n for n in names if n not in POLICIES or n in (IDEAL, SHARING, SHARING_FORMS)]:
        parser.error(f"not a policy the scheduler model replays: {', '.join(unknown)}")
    if not (TRACES / "alibaba_v2023_openb_node_list_gpu_node.csv").exists():
        print(f"traces absent: {TRACES} (they live in ../shared/data/traces); nothing measured")
        return 0
    began = time.perf_counter()
    nodes, trace = load_sample(args.variant, args.node_offset)
    catalog = load_catalog()
    config = fleets(BacktestConfig.priced())[FLEETS[args.fleet]]
    window = (min(p.arrival_s for p in trace.pods), trace.end_s)
    print(
        f"{args.variant}, offset {args.node_offset}, {FLEETS[args.fleet]}: {sum(n.gpus for n in nodes)} GPUs"
    )
    for name in names:
        run = Replay(POLICIES[name], trace.pods, nodes, catalog, config, window)
        meter = run.meter = LoadMeter(run.meter.start, run.meter.nodes)
        result = run.run()
        print(f"\n{name}: {result.node_gpu_hours:,.0f} node-GPU-hours")
        for mode in ("whole", "MPS", "MIG"):
            if meter.node_hours[mode]:
                bands = "  ".join(f"{band} {meter.by_load[(mode, band)]:>8,.0f}" for _, band in BANDS)
                pods = meter.pod_hours[mode] / meter.node_hours[mode]
                print(
                    f"  {mode:5s} by requested share of the node's GPUs: {bands}   pods per node {pods:.1f}"
                )
    print(f"\n{time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
