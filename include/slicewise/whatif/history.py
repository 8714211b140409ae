"""A pod trace and node list from the cluster's own history in Prometheus, read by the ingest's reader.

Pods come from kube-state-metrics (``kube_pod_container_resource_requests`` for GPU resources, as the ingest
pulls them): a pod arrives at its first sample and leaves one step after its last; its request is the largest
it held, summed over its containers: ``nvidia.com/gpu: k`` is k whole GPUs (an MPS tenant's share does not show
in its request: its ``slicewise.io/gpu-share`` annotation does, when kube-state-metrics exports it; a
``nvidia.com/gpu.product`` nodeSelector limits it to that model), ``nvidia.com/mig-<profile>: k`` one request
of k x g / compute slices of a GPU (of ``gpu_model``, else the first catalogue model with that profile). A pod
whose ``slicewise.io/evictable=true`` shows on ``kube_pod_annotations`` opted in to Slicewise's evictions
(``TracePod.opted_in``; the replay's ``evictable="annotated"``); the trace's notes say how many did. Nodes
come from the DCGM series of the window's last hour: each hostname with its number of physical GPUs and the
model it reports (its DCGM name, which :mod:`slicewise.whatif.gpus` maps to the catalogue).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from slicewise.catalog import Catalog, GpuModel
from slicewise.catalog.resources import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from slicewise.whatif.trace import PodTrace, TraceError, TraceNode, TracePod

if TYPE_CHECKING:
    import pandas as pd

#: Prometheus answers at most 11,000 points per series: one day at a 60 s step stays well inside.
CHUNK = timedelta(days=1)


def _request(resource: str, count: float, models: list[GpuModel]) -> tuple[int, float] | None:
    """(GPUs, share of each) for one GPU resource, or None for one that is not a GPU. A MIG resource is read on
    the first of ``models`` that has its profile."""
    if count <= 0:
        return None
    if resource == GPU_RESOURCE:
        return max(1, round(count)), 1.0
    if resource.startswith(MIG_RESOURCE_PREFIX):
        profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
        for model in models:
            match = next((p for p in model.profiles.values() if p.name.replace("+", ".") == profile), None)
            if match is not None:
                # Several slices of one pod are one request of their summed size (a model request is one slice).
                return 1, min(1.0, round(count) * match.g / model.compute_slices)
    return None


def trace_from_frames(
    demand: pd.DataFrame,
    gpu: pd.DataFrame,
    start: datetime,
    step_s: int,
    catalog: Catalog,
    gpu_model: str | None = None,
) -> tuple[PodTrace, list[TraceNode]]:
    """The pods of the demand frame and the nodes of the GPU frame, with times in seconds from ``start``. A MIG
    request's size is read on ``gpu_model`` when given, else on the first catalogue model with its profile."""
    import pandas as pd

    from slicewise.forecasting.forecasts import ksm_resource_names

    models = [catalog.model(gpu_model)] if gpu_model else list(catalog.models.values())
    names = ksm_resource_names(catalog)
    notes: list[str] = []
    pods: list[TracePod] = []
    if not demand.empty:
        frame = demand.assign(
            resource=demand["resource"].astype(str).map(lambda r: names.get(r, r)),
            second=(pd.to_datetime(demand["timestamp"], utc=True) - pd.Timestamp(start)).dt.total_seconds(),
        )
        per_step = frame.groupby(["namespace", "pod", "resource", "second"], observed=True)["requested"].sum()
        held = per_step.groupby(level=["namespace", "pod", "resource"], observed=True).max()
        seen = frame.groupby(["namespace", "pod"], observed=True)["second"].agg(["min", "max"])
        forms = _pod_forms(frame, catalog)
        skipped = 0
        for key, first, last in zip(seen.index, seen["min"], seen["max"], strict=True):
            namespace, pod = key
            requests = [
                _request(str(resource), float(count), models) for resource, count in held.loc[key].items()
            ]
            kinds = [r for r in requests if r is not None]
            if len(kinds) != 1:  # no GPU resource, or several kinds at once: not one request the model knows
                skipped += 1
                continue
            gpus, share = kinds[0]
            declared, allowed, opted_in = forms.get(key, (None, (), False))
            if declared is not None and gpus == 1:
                share = declared  # the pod's slicewise.io/gpu-share: the size its request does not show
            duration = float(last - first + step_s)
            pods.append(
                TracePod(f"{namespace}/{pod}", float(first), duration, gpus, share, "", allowed, opted_in)
            )
        if skipped:
            notes.append(f"{skipped} pods without exactly one GPU resource left out")
        notes.append(_opt_in_note(sum(p.opted_in for p in pods), len(pods)))
    if not pods:
        raise TraceError("no pod requested a GPU in that window (kube_pod_container_resource_requests)")
    if gpu.empty:
        raise TraceError("no DCGM series in the window's last hour: no node list")
    per_host = gpu.groupby("hostname", observed=True).agg(
        gpus=("gpu", "nunique"), model=("model_name", "first")
    )
    nodes = [TraceNode(str(host), int(row["gpus"]), str(row["model"])) for host, row in per_host.iterrows()]
    trace = PodTrace(tuple(sorted(pods, key=lambda p: (p.arrival_s, p.name))), tuple(notes))
    return trace, sorted(nodes, key=lambda n: n.name)


def _opt_in_note(opted_in: int, pods: int) -> str:
    """How many pods opted in to Slicewise's evictions, and what none means."""
    if opted_in:
        return f"{opted_in:,} of {pods:,} pods carried slicewise.io/evictable=true"
    return (
        f"none of {pods:,} pods carried slicewise.io/evictable=true (or kube-state-metrics does not export it: "
        "--metric-annotations-allowlist=pods=[slicewise.io/gpu-share,slicewise.io/evictable])"
    )


def _pod_forms(
    frame: pd.DataFrame, catalog: Catalog
) -> dict[tuple[str, str], tuple[float | None, tuple[str, ...], bool]]:
    """(namespace, pod) -> its last declared share, the node-list model names (DCGM names) its nodeSelector's
    ``nvidia.com/gpu.product`` allows (a product the catalogue does not know: itself, which no node reports), and
    whether it opted in to evictions (hours stored before the column existed: no)."""
    import pandas as pd

    if "declared_share" not in frame.columns:
        return {}
    if "eviction_opt_in" not in frame.columns:
        frame = frame.assign(eviction_opt_in=False)
    last = frame.sort_values("second").groupby(["namespace", "pod"], observed=True)[
        ["declared_share", "gpu_product", "eviction_opt_in"]
    ]
    out: dict[tuple[str, str], tuple[float | None, tuple[str, ...], bool]] = {}
    for key, row in last.last().iterrows():
        share = None if pd.isna(row["declared_share"]) else float(row["declared_share"])
        product = row["gpu_product"] if isinstance(row["gpu_product"], str) else ""
        model = catalog.model_for_product(product) if product else None
        allowed = (model.dcgm_model_name,) if model is not None else ((product,) if product else ())
        namespace, pod = cast("tuple[str, str]", key)
        opted_in = row["eviction_opt_in"]  # NaN where the pod's hours were all stored before the column
        out[(str(namespace), str(pod))] = (share, allowed, bool(opted_in) if pd.notna(opted_in) else False)
    return out


def read_history(
    pull_demand: Callable[[datetime, datetime], pd.DataFrame],
    pull_gpu: Callable[[datetime, datetime], pd.DataFrame],
    start: datetime,
    end: datetime,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The demand frame of ``[start, end)`` (pulled a day at a time) and the GPU frame of its last hour."""
    import pandas as pd

    if end <= start:
        raise TraceError(f"--until {end.isoformat()} is not after --since {start.isoformat()}")
    chunks = []
    at = start
    while at < end:
        chunks.append(pull_demand(at, min(end, at + CHUNK)))
        at += CHUNK
    demand = pd.concat([c for c in chunks if not c.empty] or chunks[:1], ignore_index=True)
    return demand, pull_gpu(max(start, end - timedelta(hours=1)), end)
