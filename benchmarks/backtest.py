"""Benchmark: the what-if backtest on the real Alibaba openb traces, against the ``ideal`` bound.

    .venv/bin/python benchmarks/backtest.py          # the table (issue 13's yardstick), about 5 min
    .venv/bin/python benchmarks/backtest.py --scale-down-unneeded-s 600   # the same under cluster-autoscaler
    .venv/bin/python benchmarks/backtest.py --timing [--trace default] [--node-share 1] [--gpu-model M]
        [--scale-down-unneeded-s 600]

The table: for each of ``gpushare20``, ``gpushare100``, ``default`` and ``gpuspec10``, a node share at which
``static`` makes pods wait 10 minutes or more on average (``SAMPLES``: the cluster must be short of GPUs for
partitioning to matter; the benchmark says so when a sample no longer qualifies; gpushare100's is the 26-GPU
sample of issue 13's reference figures), then every headline figure of static, packing, reactive, oracle and
ideal on four fleets of that sample:

- ``as listed``: each node's GPU model from the node list (none of them has MIG: the planner shares them by MPS),
  first-fit, under Kubernetes' default spreading (``--scheduler spread``) and under the bin-packing profile
  Slicewise ships (``--scheduler binpack``);
- ``as A100-80GB``: every GPU modelled as an A100-80GB (``--gpu-model A100-80GB``), the MIG what-if.

``--timing``: wall time per policy (each alone in this process) and peak memory, on the full trace by default
(with ``--scale-down-unneeded-s``, with the autoscaler the what-if review replays when told the cluster's).
Reads the traces from ../shared/data/traces (exits 0 with a message when they are absent). Asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.policies import parse_policies
from slicewise.whatif.report import format_table, paid_table
from slicewise.whatif.run import Backtest, replay
from slicewise.whatif.trace import hostable_on, load_nodes, load_pods, spread_sample

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
SAMPLES = {"gpushare20": 0.01, "gpushare100": 0.004, "default": 0.01, "gpuspec10": 0.02}
POLICIES = "static,packing,reactive,oracle,ideal"
LONG_WAIT_S = 600.0


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fleets(base: BacktestConfig) -> dict[str, BacktestConfig]:
    return {
        "as listed, first-fit": base,
        "as listed, Kubernetes' default spreading": dataclasses.replace(base, scheduler="spread"),
        "as listed, the bin-packing profile": dataclasses.replace(base, scheduler="binpack"),
        "as A100-80GB, first-fit": dataclasses.replace(base, gpu_model="A100-80GB"),
    }


def table(backtest: Backtest) -> str:
    gains = backtest.gains()
    lines = [
        [
            "policy",
            "node-GPU-h",
            "cut (to ideal)",
            "wait mean s",
            "cut (to ideal)",
            "P95 s",
            "> 5 min",
            "mean s frac/1/multi",
            "releasable",
            "reconf/node/h",
            "evicted",
            "util",
            "cost $",
            "unserved",
            "s",
        ]
    ]
    for name, r in backtest.results.items():
        g = gains[name]
        by_class = " / ".join(
            f"{r.wait_by_class[c].mean_s:,.0f}" if c in r.wait_by_class else "-"
            for c in ("fractional", "1 GPU", "multi-GPU")
        )
        lines.append(
            [
                name,
                f"{r.node_gpu_hours:,.0f}",
                _cut(g["node_gpu_hours_cut_vs_static"], g["node_gpu_hours_cut_share_of_ideal"]),
                f"{r.wait_mean_s:,.0f}",
                _cut(g["wait_cut_vs_static"], g["wait_cut_share_of_ideal"]),
                f"{r.wait_p95_s:,.0f}",
                f"{r.wait_over_5min:.1%}",
                by_class,
                f"{r.gpus_releasable:,.1f}",
                f"{r.reconfigs_per_node_hour:.4f}",
                f"{r.pods_evicted:,}",
                f"{r.gpu_utilisation:.1%}",
                f"{r.cost:,.0f}",
                f"{r.still_waiting:,}",
                f"{SECONDS[name]:.0f}",
            ]
        )
    return format_table(lines)


def _cut(cut: float | None, share: float | None) -> str:
    if cut is None:
        return "n/a"
    return f"{-cut:+.1%}" + ("" if share is None else f" ({share:.0%})")


SECONDS: dict[str, float] = {}


def the_table(scale_down_unneeded_s: float | None = None) -> None:
    nodes = load_nodes(TRACES / "alibaba_v2023_openb_node_list_gpu_node.csv")
    policies = parse_policies(POLICIES)
    base = dataclasses.replace(BacktestConfig.priced(), scale_down_unneeded_s=scale_down_unneeded_s)
    if scale_down_unneeded_s is not None:
        print(
            f"an autoscaler for every policy: nodes unneeded for {scale_down_unneeded_s:.0f} s are removed "
            f"(empty, or under {base.scale_down_utilization_threshold:.0%} of their GPUs requested with their pods "
            "fitting elsewhere: drained)"
        )
    began = time.perf_counter()
    for variant, share in SAMPLES.items():
        sample = spread_sample(nodes, share)
        trace = hostable_on(load_pods(TRACES / f"alibaba_v2023_openb_pod_list_{variant}.csv"), sample)
        window = (min(p.arrival_s for p in trace.pods), trace.end_s)
        gpus = sum(n.gpus for n in sample)
        print(f"\n# {variant}: {len(trace.pods):,} pods; {'; '.join(trace.notes)}")
        for fleet, config in fleets(base).items():
            results = {}
            for policy in policies:
                started = time.perf_counter()
                results[policy.name] = replay(policy, trace, sample, config, window)
                SECONDS[policy.name] = time.perf_counter() - started
            backtest = Backtest(variant, "node list", trace, sample, config, window, results, 0.0)
            print(f"\n## {variant}, --node-share {share} ({len(sample)} nodes, {gpus} GPUs), fleet {fleet}")
            print(table(backtest))
            print(paid_table(backtest))
            if results["static"].wait_mean_s < LONG_WAIT_S:
                print(f"(static waits under {LONG_WAIT_S:g} s on this sample: pick a smaller share)")
    print(f"\n{time.perf_counter() - began:.0f} s in all; peak memory {peak_rss_mib():.0f} MiB")


def timing(
    variant: str, node_share: float, names: str, gpu_model: str | None, scale_down_unneeded_s: float | None
) -> None:
    pods_file = TRACES / f"alibaba_v2023_openb_pod_list_{variant}.csv"
    began = time.perf_counter()
    trace = load_pods(pods_file)
    nodes = spread_sample(load_nodes(TRACES / "alibaba_v2023_openb_node_list_gpu_node.csv"), node_share)
    print(
        f"read {len(trace.pods):,} GPU pods and {len(nodes):,} nodes in {time.perf_counter() - began:.2f} s"
    )
    window = (min(p.arrival_s for p in trace.pods), trace.end_s)
    config = BacktestConfig.priced(gpu_model=gpu_model, scale_down_unneeded_s=scale_down_unneeded_s)
    if scale_down_unneeded_s is not None:
        print(f"with a cluster autoscaler for every node ({scale_down_unneeded_s:g} s unneeded time)")
    print(f"{'policy':<11} {'seconds':>8} {'planner runs':>13} {'s/run':>7}")
    for policy in parse_policies(names):
        began = time.perf_counter()
        result = replay(policy, trace, nodes, config, window)
        seconds = time.perf_counter() - began
        per_run = f"{seconds / result.planner_runs:7.3f}" if result.planner_runs else ""
        print(f"{policy.name:<11} {seconds:>8.1f} {result.planner_runs:>13,} {per_run}")
    print(f"peak memory of this process: {peak_rss_mib():.0f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--timing", action="store_true", help="time each policy instead of the table")
    parser.add_argument("--trace", default="default", help="--timing: openb pod list variant")
    parser.add_argument("--node-share", type=float, default=1.0, help="--timing: share of the nodes")
    parser.add_argument("--policies", default="static,static-mig,reactive,packing,oracle,ideal")
    parser.add_argument("--gpu-model", help="--timing: model every GPU as this catalogue model")
    parser.add_argument(
        "--scale-down-unneeded-s",
        type=float,
        help="the table (or --timing) with a cluster autoscaler for every policy (the backtest's flag; 600 is its "
        "default)",
    )
    args = parser.parse_args()
    if not (TRACES / "alibaba_v2023_openb_node_list_gpu_node.csv").exists():
        print(f"traces absent: {TRACES} (they live in ../shared/data/traces); nothing measured")
        return 0
    if args.timing:
        timing(args.trace, args.node_share, args.policies, args.gpu_model, args.scale_down_unneeded_s)
    else:
        the_table(args.scale_down_unneeded_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
