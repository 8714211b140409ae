"""Benchmark: pull one hour for 1,000 and 10,000 simulated GPUs from a real Prometheus.

    .venv/bin/python benchmarks/ingest.py [--gpus 1000 10000] [--keep]

For each fleet size: backfill one hour of the synthetic fleet into a fresh Prometheus (promtool), start it on a
free loopback port, then pull the hour with Slicewise's reader in a child process and print wall time, rows/s
and the child's peak memory (RSS). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HOUR = datetime(2026, 11, 20, 10, tzinfo=UTC)


def peak_rss_mib() -> float:
    """This process' peak resident memory. Not ``getrusage``: Linux carries ``ru_maxrss`` across ``execve``, so a
    child would report its parent's peak (the backfill's); ``VmHWM`` belongs to the new address space."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pull_child(url: str) -> None:
    """Runs in the child: pull the hour, print one JSON line of figures."""
    from slicewise.metrics.prometheus import PrometheusEndpoint, PrometheusReader
    from slicewise.settings import load_settings

    reader = PrometheusReader(PrometheusEndpoint(url), load_settings({"query_timeout_s": 600}))
    began = time.perf_counter()
    gpu = reader.gpu_samples(HOUR, HOUR + timedelta(hours=1))
    gpu_s = time.perf_counter() - began
    demand = reader.demand(HOUR, HOUR + timedelta(hours=1))
    total_s = time.perf_counter() - began
    print(
        json.dumps(
            {
                "gpu_rows": len(gpu),
                "gpu_series": int(gpu[["hostname", "gpu", "gpu_instance_id"]].drop_duplicates().shape[0]),
                "demand_rows": len(demand),
                "gpu_s": gpu_s,
                "total_s": total_s,
                "peak_rss_mib": peak_rss_mib(),
            }
        )
    )


def run_size(n_gpus: int, workdir: Path) -> dict[str, float]:
    from slicewise.simulator.backfill import backfill
    from slicewise.simulator.fleet import Fleet
    from slicewise.stack import processes
    from slicewise.stack import prometheus as prometheus_stack

    fleet = Fleet.synthetic(n_gpus, seed=7)
    home = workdir / f"prometheus-{n_gpus}"
    start_s = int(HOUR.timestamp())
    report = backfill(
        fleet,
        start_s - 600,
        start_s + 3600,
        60,
        home / "data",
        target_labels=prometheus_stack.FLEET_TARGET_LABELS,
    )
    service = prometheus_stack.start(home)
    try:
        child = subprocess.run(
            [sys.executable, __file__, "--pull-child", service.url],
            capture_output=True,
            text=True,
            check=False,
        )
        if child.returncode != 0:
            raise RuntimeError(child.stderr[-3000:])
        figures: dict[str, float] = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        processes.stop(service, home / "run")
    figures["backfill_s"] = report.seconds
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--pull-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pull_child:
        pull_child(args.pull_child)
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="slicewise-bench-") as tmp:
        for n_gpus in args.gpus:
            figures = run_size(n_gpus, Path(tmp))
            results[n_gpus] = figures
            rows = figures["gpu_rows"] + figures["demand_rows"]
            print(
                f"{n_gpus:>6} GPUs: {figures['gpu_series']:>6} series, {figures['gpu_rows']:>9,} GPU rows + "
                f"{figures['demand_rows']:>8,} demand rows in {figures['total_s']:6.1f} s "
                f"(GPU part {figures['gpu_s']:.1f} s) = {rows / figures['total_s']:>9,.0f} rows/s, "
                f"peak RSS {figures['peak_rss_mib']:,.0f} MiB  [backfill {figures['backfill_s']:.0f} s]",
                flush=True,
            )
    sizes = sorted(results)
    if len(sizes) >= 2:
        small, large = results[sizes[0]], results[sizes[-1]]
        print(
            f"ratio {sizes[-1]}/{sizes[0]} GPUs: time x{large['total_s'] / small['total_s']:.1f}, "
            f"memory x{large['peak_rss_mib'] / small['peak_rss_mib']:.1f} (fleet x{sizes[-1] / sizes[0]:.0f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
