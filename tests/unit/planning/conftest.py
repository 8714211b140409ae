"""Builders for planner tests: nodes, pods and forecasts as the cluster backends and the forecaster give them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from slicewise.catalog import Catalog, layout_capacity, load_catalog
from slicewise.cluster.base import GpuNode, GpuPod
from slicewise.forecasting.forecasts import DemandForecast, Forecasts, SeriesForecast
from slicewise.planning.types import NodeObservation

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


def node(
    name: str,
    model: str = "A100-80GB",
    mig_config: str = "all-balanced",
    plugin: str = "default",
    gpus: int = 4,
    *,
    state: str = "success",
    cordoned: bool = False,
    annotations: Mapping[str, str] | None = None,
) -> GpuNode:
    catalog = load_catalog()
    gpu_model = catalog.model(model)
    layout = catalog.layout_of(mig_config, model)
    return GpuNode(
        name=name,
        gpu_product=gpu_model.gpu_product,
        gpu_count=gpus,
        mig_config=mig_config,
        mig_config_state=state,
        device_plugin_config=plugin,
        allocatable=layout_capacity(gpu_model, layout, gpus, catalog.mps_replicas(plugin)),
        unschedulable=cordoned,
        annotations=dict(annotations or {}),
    )


def pod(
    name: str,
    node_name: str,
    resource: str,
    count: int = 1,
    *,
    evictable: bool = True,
    kind: str = "ReplicaSet",
) -> GpuPod:
    return GpuPod(
        namespace="team",
        name=name,
        node=node_name,
        phase="Running",
        requests={resource: count},
        owner_kind=kind,
        owner_name=name.rsplit("-", 1)[0],
        evictable=evictable,
        blockers=() if evictable else ("no slicewise.io/evictable=true annotation",),
    )


def observe(gpu_node: GpuNode, *pods: GpuPod) -> NodeObservation:
    return NodeObservation(gpu_node, tuple(pods))


def whole_gpu_load(
    node_name: str, gpus: int, upper: float, p50: float | None = None, memory: float = 0.2
) -> list[SeriesForecast]:
    return [
        SeriesForecast(node_name, gpu, "", "", upper if p50 is None else p50, upper, memory)
        for gpu in range(gpus)
    ]


def mig_load(gpu_node: GpuNode, upper: float, catalog: Catalog) -> list[SeriesForecast]:
    """The same forecast for every MIG instance of the node's current layout."""
    model = catalog.model_for_product(gpu_node.gpu_product)
    assert model is not None
    layout = catalog.layout_of(gpu_node.mig_config, model.name) or ()
    out = []
    for gpu in range(gpu_node.gpu_count):
        instance = 0
        for profile, count in layout:
            for _ in range(count):
                out.append(SeriesForecast(gpu_node.name, gpu, str(instance), profile, upper, upper, 0.3))
                instance += 1
    return out


def forecasts(
    series: list[SeriesForecast] | None = None,
    demand: Mapping[str, float] | None = None,
    *,
    trusted: bool = True,
) -> Forecasts:
    return Forecasts(
        series=tuple(series or ()),
        demand=tuple(DemandForecast(r, v / 2, v) for r, v in (demand or {}).items()),
        predictor="champion v3" if trusted else "p90_last_hour",
        trusted=trusted,
        why_untrusted="" if trusted else "baseline p90_last_hour wins",
    )
