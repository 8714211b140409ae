"""Hand-made GPU and demand frames (the schema's columns and dtypes) for the cost tests: a few series, each
constant over the minutes it exists, so every expected number can be worked out on paper."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from slicewise import schema
from slicewise.catalog import load_catalog
from slicewise.cluster.base import GpuNode
from slicewise.costs.pricing import Price, PriceTable
from slicewise.costs.sharing import LabelEvent, LayoutHistory, observed_events

HOUR = datetime(2026, 11, 24, 10, tzinfo=UTC)
NAN = float("nan")
CATALOG = load_catalog()
A100_80 = CATALOG.model("A100-80GB").dcgm_model_name
H100 = CATALOG.model("H100-80GB").dcgm_model_name
H200 = CATALOG.model("H200-141GB").dcgm_model_name
A30 = CATALOG.model("A30-24GB").dcgm_model_name
#: Round prices so expected money is easy to check by hand.
PRICES = PriceTable(
    models={
        "A100-80GB": Price(2.0, "test price A100-80GB"),
        "H100-80GB": Price(4.0, "test price H100-80GB"),
        "H200-141GB": Price(5.0, "test price H200-141GB"),
    }
)
NO_HISTORY = LayoutHistory.of([])


def series(
    node: str,
    gpu: int,
    model_name: str,
    *,
    profile: str = "",
    instance: str = "",
    namespace: str = "",
    pod: str = "",
    container: str = "",
    engine: float = 0.0,
    dram: float = 0.0,
    gpu_util: float | None = None,
    rx: float = 1e5,
    start: datetime = HOUR,
    minutes: int = 60,
) -> list[dict[str, Any]]:
    """One GPU series, one row per minute from ``start``; ``gpu_util`` defaults to 100 x engine on whole GPUs."""
    if gpu_util is None:
        gpu_util = NAN if instance else engine * 100
    return [
        {
            "timestamp": start + timedelta(minutes=m),
            "hostname": node,
            "gpu": gpu,
            "uuid": f"GPU-{node}-{gpu}",
            "model_name": model_name,
            "mig_profile": profile,
            "gpu_instance_id": instance,
            "namespace": namespace,
            "pod": pod,
            "container": container,
            "gpu_util": gpu_util,
            "engine_active": engine,
            "dram_active": dram,
            "fb_used_mib": 1000.0,
            "fb_free_mib": 1000.0,
            "power_w": 100.0,
            "pcie_tx_bytes_per_s": rx * 0.3,
            "pcie_rx_bytes_per_s": rx,
        }
        for m in range(minutes)
    ]


def gpu_frame(*parts: Iterable[dict[str, Any]]) -> pd.DataFrame:
    rows = [row for part in parts for row in part]
    return pd.DataFrame(rows, columns=list(schema.GPU_COLUMNS)).astype(schema.GPU_DTYPES)


def requests(
    node: str,
    namespace: str,
    pod: str,
    *,
    resource: str = "nvidia_com_gpu",
    requested: float = 1.0,
    container: str = "main",
    start: datetime = HOUR,
    minutes: int = 60,
    unschedulable: bool = False,
) -> list[dict[str, Any]]:
    return [
        {
            "timestamp": start + timedelta(minutes=m),
            "namespace": namespace,
            "pod": pod,
            "container": container,
            "node": node,
            "resource": resource,
            "requested": requested,
            "unschedulable": unschedulable,
            "declared_share": float("nan"),
            "gpu_product": "",
            "gpu_sharing": "",
            "gpu_replicas": "",
        }
        for m in range(minutes)
    ]


def demand_frame(*parts: Iterable[dict[str, Any]]) -> pd.DataFrame:
    rows = [row for part in parts for row in part]
    return pd.DataFrame(rows, columns=list(schema.DEMAND_COLUMNS)).astype(schema.DEMAND_DTYPES)


def one(rows: pd.DataFrame, **match: Any) -> pd.Series:
    """The single allocation row matching every ``column=value``."""
    mask = pd.Series(True, index=rows.index)
    for column, value in match.items():
        mask &= rows[column] == value
    found = rows[mask]
    assert len(found) == 1, f"{len(found)} rows match {match}:\n{rows}"
    return found.iloc[0]


def gpu_node(name: str, device_plugin_config: str, labels: dict[str, str] | None = None) -> GpuNode:
    return GpuNode(
        name=name,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        gpu_count=1,
        mig_config="all-disabled",
        mig_config_state="success",
        device_plugin_config=device_plugin_config,
        allocatable={"nvidia.com/gpu": 4},
        unschedulable=False,
        labels=labels or {},
    )


def observed_at(
    at: datetime, node: str, device_plugin_config: str, labels: dict[str, str] | None = None
) -> list[LabelEvent]:
    """What a plans/<run>/observed.json made at ``at`` says about one node."""
    return observed_events(at, [gpu_node(node, device_plugin_config, labels)])


def balanced_a100() -> pd.DataFrame:
    """One A100-80GB split 2x1g.10gb + 1x2g.20gb + 1x3g.40gb; three tenants, one 1g slice idle."""
    node, model = "node-a", A100_80
    return gpu_frame(
        series(node, 0, model, profile="3g.40gb", instance="1", namespace="team-a", pod="a", engine=0.5),
        series(node, 0, model, profile="2g.20gb", instance="2", namespace="team-b", pod="b", engine=0.25),
        series(node, 0, model, profile="1g.10gb", instance="3", namespace="team-c", pod="c", engine=1.0),
        series(node, 0, model, profile="1g.10gb", instance="4"),
    )
