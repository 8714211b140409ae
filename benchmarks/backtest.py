"""Benchmark: the what-if backtest on the real Alibaba openb traces; prints wall time per policy and peak memory.

    .venv/bin/python benchmarks/backtest.py [--trace default] [--node-share 1.0] [--policies static,packing]

Each policy runs alone in this process (one core), so the figures add up to what ``slicewise backtest`` spends
over its workers. Reads the traces from ../shared/data/traces (exits 0 with a message when they are absent).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.policies import POLICIES, parse_policies
from slicewise.whatif.run import replay
from slicewise.whatif.trace import load_nodes, load_pods, spread_sample

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace", default="default", help="openb pod list variant (default, gpushare100, ...)"
    )
    parser.add_argument("--node-share", type=float, default=1.0)
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    pods_file = TRACES / f"alibaba_v2023_openb_pod_list_{args.trace}.csv"
    if not pods_file.exists():
        print(f"traces absent: {pods_file} (they live in ../shared/data/traces); nothing measured")
        return 0
    began = time.perf_counter()
    trace = load_pods(pods_file)
    nodes = spread_sample(load_nodes(TRACES / "alibaba_v2023_openb_node_list_gpu_node.csv"), args.node_share)
    print(
        f"read {len(trace.pods):,} GPU pods and {len(nodes):,} nodes in {time.perf_counter() - began:.2f} s"
    )
    window = (min(p.arrival_s for p in trace.pods), trace.end_s)
    print(f"{'policy':<11} {'seconds':>8} {'planner runs':>13} {'s/run':>7}")
    for policy in parse_policies(args.policies):
        began = time.perf_counter()
        result = replay(policy, trace, nodes, BacktestConfig(), window)
        seconds = time.perf_counter() - began
        per_run = seconds / result.planner_runs if result.planner_runs else float("nan")
        print(f"{policy.name:<11} {seconds:>8.1f} {result.planner_runs:>13,} {per_run:>7.3f}")
    print(f"peak memory of this process: {peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
