"""Every sample of GPU capacity, attributed: who held which share of which GPU at each minute, and how much of
it they used. :mod:`slicewise.costs.allocation` sums these into OpenCost-style rows.

One GPU-minute of capacity is split without loss (so the cluster total always reconciles):

- **MIG instance** (a DCGM series with ``gpu_instance_id``): its share of the GPU — compute slices / the model's
  compute slices (``compute``, default) or memory slices / memory slices (``memory``) — to the pod DCGM names
  on it, else ``__idle__``. Used = ``engine_active`` x share (DCGM reports activity per instance).
- **slices no instance covers** (e.g. 3g+3g leaves 1/7 of the compute): ``__idle__``, kind ``uncovered``.
- **whole GPU, not shared**: 1 to the pod DCGM names, else ``__idle__``. Used = ``engine_active``, or
  ``gpu_util`` / 100 where profiling metrics are missing (``usage_method`` says so).
- **whole GPU shared by MPS** (``replicas`` > 1, see :mod:`slicewise.costs.sharing`): DCGM cannot tell tenants
  apart (the series carry no pod labels), so each running ``nvidia.com/gpu`` request on the node in the demand
  frame gets ``requested / replicas`` of a GPU, the node's unrequested replicas go to ``__idle__``, and
  the node's measured activity is split over the tenants in proportion to their shares, capped at each share —
  an **estimate** (``usage_estimate``). Activity beyond the tenants' shares (MPS caps a client's threads, not
  the engine's busy time) stays on the node's ``__idle__`` line, so no measured activity is lost.

A sample whose activity was not measured keeps its capacity (``alloc``) but has ``used`` NaN and counts as
``unmeasured``: never guessed as idle or busy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise.catalog import Catalog, GpuModel, ksm_resource, resource_for_profile
from slicewise.costs.sharing import LayoutHistory, Sharing, mps_replicas

if TYPE_CHECKING:
    import pandas as pd

NO_WORKLOAD = "__idle__"
MIG, WHOLE, MPS, UNCOVERED = "mig", "whole", "mps", "uncovered"
GPU_KSM = ksm_resource("nvidia.com/gpu")
COMPUTE, MEMORY = "compute", "memory"
MIG_SHARE_MODES = (COMPUTE, MEMORY)

ENGINE, GPU_UTIL, NOT_MEASURED = "engine_active", "gpu_util (no profiling metrics)", "not measured"
MPS_SPLIT = "MPS split by share (estimate)"
NO_INSTANCE = "no MIG instance covers these slices"
IDLE_REPLICAS = "unrequested MPS replicas"

#: Columns of the sample table (one row per attributed share of one GPU series at one timestamp).
COLUMNS = (
    "timestamp",
    "hour",
    "node",
    "gpu",
    "gpu_instance_id",
    "gpu_model",
    "kind",
    "resource",
    "namespace",
    "pod",
    "container",
    "share",
    "alloc",
    "used",
    "unmeasured",
    "usage_method",
    "replicas",
    "replicas_method",
    "activity",
    "dram_active",
    "pcie_rx_bytes_per_s",
)

_PROFILE_G = re.compile(r"^(\d+)g\.")


def models_by_dcgm_name(catalog: Catalog) -> dict[str, GpuModel]:
    return {m.dcgm_model_name: m for m in catalog.models.values()}


def mig_share(model: GpuModel | None, profile: str, mode: str) -> float:
    """The share of a GPU that one ``profile`` instance is (``mode`` compute or memory).

    An unknown model or profile falls back to ``g / 7`` read from the profile's name (A100/H100/H200 geometry).
    """
    if mode not in MIG_SHARE_MODES:
        raise ValueError(f"cost_mig_share must be one of {MIG_SHARE_MODES}, got {mode!r}")
    if model is not None and profile in model.profiles:
        found = model.profiles[profile]
        if mode == MEMORY:
            return found.mem_slices / model.memory_slices
        return found.g / model.compute_slices
    match = _PROFILE_G.match(profile)
    return int(match[1]) / 7 if match else 0.0


def hour_samples(
    gpu: pd.DataFrame,
    demand: pd.DataFrame,
    *,
    catalog: Catalog,
    history: LayoutHistory,
    mig_share_mode: str = COMPUTE,
    step_s: int = 60,
) -> pd.DataFrame:
    """The sample table (``COLUMNS``) of the GPU and demand frames of (normally) one hour.

    ``alloc``, ``used`` and ``unmeasured`` are GPU-hours (each sample stands for ``step_s`` seconds).
    """
    import pandas as pd

    if gpu.empty:
        return _empty()
    weight = step_s / 3600.0
    g = gpu.reset_index(drop=True).copy()
    g["hour"] = g["timestamp"].dt.floor("h")
    by_name = models_by_dcgm_name(catalog)
    g["gpu_model"] = [by_name[n].name if n in by_name else str(n) for n in g["model_name"].astype(str)]
    g["node"] = g["hostname"].astype(str)
    for label in ("gpu_instance_id", "mig_profile", "namespace", "pod", "container"):
        g[label] = g[label].fillna("").astype(str)
    is_mig = (g["gpu_instance_id"] != "").to_numpy()

    activity = g["engine_active"].astype(float).to_numpy().copy()
    method = np.where(np.isnan(activity), NOT_MEASURED, ENGINE).astype(object)
    fallback = np.isnan(activity) & ~is_mig & g["gpu_util"].notna().to_numpy()
    activity[fallback] = g["gpu_util"].to_numpy(dtype=float)[fallback] / 100.0
    method[fallback] = GPU_UTIL
    g["activity"] = np.clip(activity, 0.0, 1.0)
    g["usage_method"] = method

    sharing = _node_sharing(g[~is_mig], demand, catalog, history)
    replicas = [
        sharing[(n, h)].replicas if not m else 1 for n, h, m in zip(g["node"], g["hour"], is_mig, strict=True)
    ]
    g["replicas"] = np.asarray(replicas, dtype=np.int64)
    g["replicas_method"] = [
        sharing[(n, h)].method if not m else "" for n, h, m in zip(g["node"], g["hour"], is_mig, strict=True)
    ]
    shared = ~is_mig & (g["replicas"].to_numpy() > 1)

    parts = [
        _dedicated(g[is_mig], by_name, mig_share_mode, weight, MIG),
        _dedicated(g[~is_mig & ~shared], by_name, mig_share_mode, weight, WHOLE),
    ]
    parts.append(_uncovered(parts[0], weight))
    parts.extend(_mps(g[shared], demand, weight))
    parts = [p for p in parts if not p.empty]
    if not parts:
        return _empty()
    out = pd.concat(parts, ignore_index=True)
    return out[list(COLUMNS)]


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype=float if c in _FLOATS else object) for c in COLUMNS})


_FLOATS = ("share", "alloc", "used", "unmeasured", "activity", "dram_active", "pcie_rx_bytes_per_s")


def _running_gpu_requests(demand: pd.DataFrame) -> pd.DataFrame:
    running = demand[(demand["resource"] == GPU_KSM) & ~demand["unschedulable"].astype(bool)]
    return running[running["node"].fillna("") != ""]


def _node_sharing(
    whole: pd.DataFrame, demand: pd.DataFrame, catalog: Catalog, history: LayoutHistory
) -> dict[tuple[str, Any], Sharing]:
    """MPS replicas per (node, hour) of the nodes with whole GPUs."""
    if whole.empty:
        return {}
    running = _running_gpu_requests(demand)
    per_minute: Mapping[tuple[str, Any], list[float]] = {}
    if not running.empty:
        sums = (
            running.assign(hour=running["timestamp"].dt.floor("h"))
            .groupby(["node", "hour", "timestamp"], as_index=False)["requested"]
            .sum()
        )
        grouped: dict[tuple[str, Any], list[float]] = {}
        for node, hour, total in zip(sums["node"], sums["hour"], sums["requested"], strict=True):
            grouped.setdefault((str(node), hour), []).append(float(total))
        per_minute = grouped
    gpus = whole.groupby(["node", "hour"], as_index=False).agg(gpus=("gpu", "nunique"))
    out: dict[tuple[str, Any], Sharing] = {}
    for node, hour, count in zip(gpus["node"], gpus["hour"], gpus["gpus"], strict=True):
        known = history.at(str(node), hour.to_pydatetime())
        out[(str(node), hour)] = mps_replicas(
            known, catalog, per_minute.get((str(node), hour), []), int(count)
        )
    return out


def _dedicated(
    rows: pd.DataFrame, by_name: Mapping[str, GpuModel], mode: str, weight: float, kind: str
) -> pd.DataFrame:
    """Whole GPUs or MIG instances: the series' share to the pod DCGM names on it, or ``__idle__``."""
    if rows.empty:
        return rows.iloc[0:0]
    out = rows.copy()
    models = {m.name: m for m in by_name.values()}
    if kind == MIG:
        out["share"] = [
            mig_share(models.get(m), p, mode)
            for m, p in zip(out["gpu_model"], out["mig_profile"], strict=True)
        ]
        out["resource"] = [ksm_resource(resource_for_profile(p)) for p in out["mig_profile"]]
        out = _normalised(out)
    else:
        out["share"] = 1.0
        out["resource"] = GPU_KSM
    out["kind"] = kind
    owned = out["pod"] != ""
    out.loc[~owned, "namespace"] = NO_WORKLOAD
    out.loc[~owned, "container"] = ""
    out["alloc"] = out["share"] * weight
    measured = out["usage_method"] != NOT_MEASURED
    out["used"] = np.where(measured, out["activity"] * out["alloc"], np.nan)
    out["unmeasured"] = np.where(measured, 0.0, out["alloc"])
    # PCIe is per physical GPU: only a whole, unshared GPU's traffic belongs to its one pod.
    if kind == MIG:
        out["pcie_rx_bytes_per_s"] = np.nan
    return out


def _normalised(mig: pd.DataFrame) -> pd.DataFrame:
    """Shares of one GPU's instances at one instant never exceed the GPU (an impossible layout is scaled)."""
    total = mig.groupby(["node", "gpu", "timestamp"])["share"].transform("sum")
    mig["share"] = np.where(total > 1.0 + 1e-9, mig["share"] / total, mig["share"])
    return mig


def _uncovered(mig: pd.DataFrame, weight: float) -> pd.DataFrame:
    """The part of each MIG GPU no instance covers, per timestamp, as ``__idle__`` capacity."""
    import pandas as pd

    if mig.empty:
        return mig
    keys = ["node", "gpu", "timestamp", "hour", "gpu_model", "replicas", "replicas_method"]
    covered = mig.groupby(keys, as_index=False)["share"].sum()
    covered["share"] = 1.0 - covered["share"]
    left = covered[covered["share"] > 1e-9].copy()
    if left.empty:
        return left
    left["alloc"] = left["share"] * weight
    return pd.DataFrame(
        {
            **{k: left[k] for k in keys},
            "gpu_instance_id": "",
            "kind": UNCOVERED,
            "resource": "",
            "namespace": NO_WORKLOAD,
            "pod": "",
            "container": "",
            "share": left["share"],
            "alloc": left["alloc"],
            "used": 0.0,  # nothing can run on slices no instance covers
            "unmeasured": 0.0,
            "usage_method": NO_INSTANCE,
            "activity": 0.0,
            "dram_active": np.nan,
            "pcie_rx_bytes_per_s": np.nan,
        }
    )


def _mps(shared: pd.DataFrame, demand: pd.DataFrame, weight: float) -> list[pd.DataFrame]:
    """MPS nodes: tenants from the demand frame, an estimated split of the GPUs' activity, idle replicas."""
    import pandas as pd

    if shared.empty:
        return []
    keys = ["node", "timestamp"]
    carried = ["hour", "gpu_model", "replicas", "replicas_method"]
    per_node = shared.groupby(keys, as_index=False).agg(
        capacity=("gpu", "size"),
        busy=("activity", lambda s: s.sum(min_count=1)),
        methods=("usage_method", lambda s: "+".join(sorted(set(s)))),
        **{c: (c, "first") for c in carried},
    )
    running = _running_gpu_requests(demand)[
        ["node", "timestamp", "namespace", "pod", "container", "requested"]
    ]
    tenants = per_node.merge(running, on=keys, how="inner")
    tenants["share"] = tenants["requested"] / tenants["replicas"]
    wanted = tenants.groupby(keys)["share"].transform("sum")
    # More tenants than replicas x GPUs means the replicas are wrong: shares are scaled to fit the GPUs.
    scale = np.minimum(1.0, tenants["capacity"] / wanted.where(wanted > 0, 1.0))
    tenants["share"] = tenants["share"] * scale
    held = tenants.groupby(keys)["share"].transform("sum")
    measured = tenants["busy"].notna()
    busy = tenants["busy"].fillna(0.0).clip(upper=tenants["capacity"])
    tenant_used = np.minimum(busy * tenants["share"] / held.where(held > 0, 1.0), tenants["share"])
    tenants["alloc"] = tenants["share"] * weight
    tenants["used"] = np.where(measured, tenant_used * weight, np.nan)
    tenants["unmeasured"] = np.where(measured, 0.0, tenants["alloc"])
    tenants["usage_method"] = np.where(measured, MPS_SPLIT + " of " + tenants["methods"], NOT_MEASURED)
    tenants["kind"] = MPS

    node_held = tenants.groupby(keys, as_index=False).agg(held=("share", "sum"), tenant_used=("used", "sum"))
    idle = per_node.merge(node_held, on=keys, how="left").fillna({"held": 0.0, "tenant_used": 0.0})
    idle["share"] = (idle["capacity"] - idle["held"]).clip(lower=0.0)
    idle = idle[idle["share"] > 1e-9].copy()
    idle_measured = idle["busy"].notna()
    spare = (idle["busy"].fillna(0.0).clip(upper=idle["capacity"]) - idle["tenant_used"] / weight).clip(
        lower=0.0
    )
    idle["alloc"] = idle["share"] * weight
    idle["used"] = np.where(idle_measured, np.minimum(spare, idle["share"]) * weight, np.nan)
    idle["unmeasured"] = np.where(idle_measured, 0.0, idle["alloc"])
    idle["usage_method"] = np.where(idle_measured, IDLE_REPLICAS + " (" + idle["methods"] + ")", NOT_MEASURED)
    idle["kind"] = MPS
    idle["namespace"], idle["pod"], idle["container"] = NO_WORKLOAD, "", ""

    out = []
    for part in (tenants, idle):
        if part.empty:
            continue
        part = part.copy()
        part["gpu"] = -1  # DCGM cannot say which of the node's GPUs a tenant runs on
        part["gpu_instance_id"] = ""
        part["resource"] = GPU_KSM
        part["activity"] = np.nan
        part["dram_active"] = np.nan
        part["pcie_rx_bytes_per_s"] = np.nan
        out.append(pd.DataFrame({c: part[c] for c in COLUMNS}))
    return out
