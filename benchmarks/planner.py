"""Benchmark: plan a fleet of 10,000 GPU nodes (both policies) and print the time and peak memory.

    .venv/bin/python benchmarks/planner.py [--nodes 1000 10000] [--seed 7]

Nodes cycle through the five catalogue models and typical layouts (MIG, MPS, whole GPUs), with 8 GPUs each,
random running pods (some not evictable), a forecast per GPU / MIG instance and pending demand for several
MIG profiles. Only ``plan_fleet`` is timed (the pure planner); building the inputs is not. Asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, datetime
from pathlib import Path

from slicewise.catalog import Catalog, layout_capacity, load_catalog
from slicewise.cluster.base import GpuNode, GpuPod
from slicewise.forecasting.forecasts import DemandForecast, Forecasts, SeriesForecast
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import NodeObservation

TEMPLATES = (
    ("A100-80GB", "all-balanced", "default"),
    ("A100-80GB", "all-1g.10gb", "default"),
    ("H100-80GB", "all-disabled", "mps-4"),
    ("H100-80GB", "all-disabled", "default"),
    ("H200-141GB", "all-3g.71gb", "default"),
    ("A100-40GB", "all-1g.5gb", "default"),
    ("A30-24GB", "all-balanced", "default"),
)
GPUS = 8
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def synthetic_fleet(
    n_nodes: int, catalog: Catalog, rng: random.Random
) -> tuple[list[NodeObservation], Forecasts]:
    observations, series = [], []
    for i in range(n_nodes):
        model_name, mig_config, plugin = TEMPLATES[i % len(TEMPLATES)]
        model = catalog.model(model_name)
        layout = catalog.layout_of(mig_config, model_name)
        replicas = catalog.mps_replicas(plugin)
        capacity = layout_capacity(model, layout, GPUS, replicas)
        name = f"node-{i:05d}"
        node = GpuNode(name, model.gpu_product, GPUS, mig_config, "success", plugin, capacity, False)
        pods: list[GpuPod] = []
        for resource, count in capacity.items():
            for k in range(rng.randint(0, count)):
                pods.append(
                    GpuPod(
                        "team",
                        f"{name}-p{len(pods)}",
                        name,
                        "Running",
                        {resource: 1},
                        "ReplicaSet",
                        "rs",
                        evictable=rng.random() > 0.1,
                    )
                )
                if k > 6:
                    break
        observations.append(NodeObservation(node, tuple(pods)))
        for gpu in range(GPUS):
            if layout is None:
                series.append(
                    SeriesForecast(name, gpu, "", "", rng.random() * 0.6, rng.random(), rng.random() * 0.5)
                )
                continue
            instance = 0
            for profile, count in layout:
                for _ in range(count):
                    upper = rng.random()
                    series.append(SeriesForecast(name, gpu, str(instance), profile, upper * 0.6, upper, 0.3))
                    instance += 1
    demand = tuple(
        DemandForecast(resource, n / 2, n)
        for resource, n in {
            "nvidia.com/mig-3g.40gb": n_nodes * 0.5,
            "nvidia.com/mig-1g.10gb": n_nodes * 2.0,
            "nvidia.com/mig-2g.35gb": n_nodes * 0.3,
            "nvidia.com/gpu": n_nodes * 1.0,
        }.items()
    )
    return observations, Forecasts(tuple(series), demand, "champion v1", True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    catalog = load_catalog()
    print(f"{'nodes':>7} {'GPUs':>7} {'series':>8} {'policy':>10} {'plan s':>8} {'ms/node':>8}  actions")
    for n_nodes in args.nodes:
        observations, forecasts = synthetic_fleet(n_nodes, catalog, random.Random(args.seed))
        for policy in ("packing", "thresholds"):
            config = PlannerConfig(policy=policy, max_change_share=0.25)
            started = time.perf_counter()
            plan = plan_fleet(observations, forecasts, catalog, config, NOW)
            seconds = time.perf_counter() - started
            counts = {a: n for a, n in plan.counts().items() if n}
            print(
                f"{n_nodes:>7} {n_nodes * GPUS:>7} {len(forecasts.series):>8} {policy:>10} {seconds:>8.2f} "
                f"{1000 * seconds / n_nodes:>8.2f}  {counts}"
            )
    print(f"peak memory of this process: {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
