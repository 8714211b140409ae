"""Why allocated GPUs sat idle, per namespace, with the evidence — and "not measured" where DCGM cannot say.

Categories (thresholds are settings, docs/costs.md):

- ``allocated_but_idle``: allocated GPU-hours not used (from the allocation rows; MPS tenants' part is an
  estimate there, and says so).
- ``memory_bound``: samples with engine activity below ``cost_low_engine`` while DRAM activity is at least
  ``cost_memory_bound_dram`` (the engine waits on memory).
- ``input_bound``: engine activity below ``cost_low_engine`` while host-to-GPU PCIe traffic is at least
  ``cost_input_bound_pcie_rx_bytes_per_s`` (the GPU waits on data: a likely input pipeline bottleneck). PCIe is
  counted per physical GPU, so only whole, unshared GPUs can carry this evidence; MIG instances and MPS
  tenants are "not measured" here.
- ``could_share``: a pod on a whole GPU whose activity stayed below ``cost_share_util`` for at least
  ``cost_share_min_fraction`` of its measured time (a candidate for a MIG slice or MPS).

Evidence is summed per hour (:func:`hour_evidence`, additive), then judged over the period
(:func:`attribute_idle`). MPS tenants have no per-pod activity at all, so only ``allocated_but_idle`` speaks
for them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise.costs.samples import MIG, NO_WORKLOAD, WHOLE

if TYPE_CHECKING:
    import pandas as pd

    from slicewise.settings import Settings

ALLOCATED_BUT_IDLE, MEMORY_BOUND, INPUT_BOUND, COULD_SHARE = (
    "allocated_but_idle",
    "memory_bound",
    "input_bound",
    "could_share",
)
CATEGORIES = (ALLOCATED_BUT_IDLE, MEMORY_BOUND, INPUT_BOUND, COULD_SHARE)
MEASURED, NOT_MEASURED, NOT_APPLICABLE = "measured", "not measured", "not applicable"

EVIDENCE_KEY = ("hour", "node", "gpu", "gpu_instance_id", "kind", "namespace", "pod", "container")
EVIDENCE_SUMS = (
    "alloc_h",
    "activity_h",  # allocated hours whose activity was measured
    "activity_sum",  # sum of activity x hours (mean = activity_sum / activity_h)
    "dram_h",  # measured activity and DRAM activity
    "memory_bound_h",
    "memory_bound_dram_sum",
    "pcie_h",  # measured activity and PCIe on a whole GPU
    "input_bound_h",
    "input_bound_rx_sum",
    "below_share_h",
)


@dataclass(frozen=True)
class IdleThresholds:
    low_engine: float = 0.2
    memory_bound_dram: float = 0.5
    input_bound_pcie_rx: float = 1.0e9
    share_util: float = 0.3
    share_min_fraction: float = 0.8

    @classmethod
    def from_settings(cls, settings: Settings) -> IdleThresholds:
        return cls(
            low_engine=settings.cost_low_engine,
            memory_bound_dram=settings.cost_memory_bound_dram,
            input_bound_pcie_rx=settings.cost_input_bound_pcie_rx_bytes_per_s,
            share_util=settings.cost_share_util,
            share_min_fraction=settings.cost_share_min_fraction,
        )


@dataclass(frozen=True)
class IdleFinding:
    namespace: str
    category: str
    status: str  # measured | not measured | not applicable
    gpuHours: float | None  # OpenCost's spelling
    cost: float | None
    evidence: str
    candidates: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["candidates"] = list(self.candidates)
        return out


def hour_evidence(samples: pd.DataFrame, thresholds: IdleThresholds) -> pd.DataFrame:
    """Per pod and GPU series: the additive sums the categories are judged on (``EVIDENCE_SUMS``)."""
    import pandas as pd

    pods = samples[samples["kind"].isin((MIG, WHOLE)) & (samples["namespace"] != NO_WORKLOAD)]
    if pods.empty:
        return pd.DataFrame(columns=[*EVIDENCE_KEY, *EVIDENCE_SUMS])
    hours = pods["alloc"].to_numpy(dtype=float)
    act = pods["activity"].to_numpy(dtype=float)
    measured = (pods["usage_method"] != "not measured").to_numpy() & ~np.isnan(act)
    dram = pods["dram_active"].to_numpy(dtype=float)
    rx = pods["pcie_rx_bytes_per_s"].to_numpy(dtype=float)
    whole = (pods["kind"] == WHOLE).to_numpy()
    low = measured & (act < thresholds.low_engine)
    with_dram = measured & ~np.isnan(dram)
    memory_bound = low & with_dram & (dram >= thresholds.memory_bound_dram)
    with_pcie = measured & whole & ~np.isnan(rx)
    input_bound = low & with_pcie & (rx >= thresholds.input_bound_pcie_rx)
    below_share = measured & whole & (act < thresholds.share_util)
    frame = pods[list(EVIDENCE_KEY)].copy()
    values = {
        "alloc_h": hours,
        "activity_h": np.where(measured, hours, 0.0),
        "activity_sum": np.where(measured, act * hours, 0.0),
        "dram_h": np.where(with_dram, hours, 0.0),
        "memory_bound_h": np.where(memory_bound, hours, 0.0),
        "memory_bound_dram_sum": np.where(memory_bound, dram * hours, 0.0),
        "pcie_h": np.where(with_pcie, hours, 0.0),
        "input_bound_h": np.where(input_bound, hours, 0.0),
        "input_bound_rx_sum": np.where(input_bound, rx * hours, 0.0),
        "below_share_h": np.where(below_share, hours, 0.0),
    }
    for name, column in values.items():
        frame[name] = column
    return frame.groupby(list(EVIDENCE_KEY), as_index=False, dropna=False)[list(EVIDENCE_SUMS)].sum()


def attribute_idle(
    evidence: pd.DataFrame, rows: pd.DataFrame, thresholds: IdleThresholds
) -> list[IdleFinding]:
    """Every category for every namespace that held GPUs, each measured with evidence or saying why not.

    ``rows``: the allocation rows of the period (prices per node and hour come from them).
    """
    findings: list[IdleFinding] = []
    tenants = rows[rows["namespace"] != NO_WORKLOAD]
    price = _price_lookup(rows)
    for namespace in sorted(tenants["namespace"].unique()):
        mine = tenants[tenants["namespace"] == namespace]
        ev = evidence[evidence["namespace"] == namespace] if not evidence.empty else evidence
        findings.append(_allocated_but_idle(namespace, mine))
        findings.append(_memory_bound(namespace, ev, price, thresholds))
        findings.append(_input_bound(namespace, ev, price, thresholds))
        findings.append(_could_share(namespace, ev, price, thresholds))
    return findings


def _price_lookup(rows: pd.DataFrame) -> dict[tuple[str, str], float]:
    first = rows.drop_duplicates(["node", "start"])
    return {
        (n, s): float(p)
        for n, s, p in zip(first["node"], first["start"], first["price_per_gpu_hour"], strict=True)
    }


def _cost(ev: pd.DataFrame, column: str, price: dict[tuple[str, str], float]) -> float:
    starts = ev["hour"].map(lambda h: h.strftime("%Y-%m-%dT%H:%M:%SZ"))
    unit = [price.get((n, s), 0.0) for n, s in zip(ev["node"], starts, strict=True)]
    return float((ev[column].to_numpy(dtype=float) * np.asarray(unit, dtype=float)).sum())


def _allocated_but_idle(namespace: str, rows: pd.DataFrame) -> IdleFinding:
    allocated = float(rows["gpuHours"].sum())
    unmeasured = float(rows["unmeasuredGpuHours"].sum())
    if allocated - unmeasured <= 1e-12:
        return IdleFinding(
            namespace,
            ALLOCATED_BUT_IDLE,
            NOT_MEASURED,
            None,
            None,
            f"no activity measured on its {allocated:.2f} allocated GPU-h",
        )
    idle = float(rows["idleGpuHours"].sum())
    used = float(rows["usedGpuHours"].sum())
    text = f"{idle:.2f} of {allocated - unmeasured:.2f} measured allocated GPU-h idle (used {used:.2f} GPU-h)"
    estimated = float(rows.loc[rows["usage_estimate"].astype(bool), "gpuHours"].sum())
    if estimated > 0:
        text += f"; {estimated:.2f} GPU-h on MPS GPUs: usage split by share (estimate)"
    if unmeasured > 0:
        text += f"; {unmeasured:.2f} GPU-h not measured"
    return IdleFinding(namespace, ALLOCATED_BUT_IDLE, MEASURED, idle, float(rows["gpuCostIdle"].sum()), text)


def _memory_bound(
    namespace: str, ev: pd.DataFrame, price: dict[tuple[str, str], float], t: IdleThresholds
) -> IdleFinding:
    measured = float(ev["dram_h"].sum()) if not ev.empty else 0.0
    if measured <= 0:
        why = "no DRAM-activity samples (DCGM_FI_PROF_DRAM_ACTIVE) on its GPUs or MIG instances"
        if ev.empty:
            why = "no per-pod DCGM series (MPS tenants share unlabelled GPUs)"
        return IdleFinding(namespace, MEMORY_BOUND, NOT_MEASURED, None, None, why)
    hours = float(ev["memory_bound_h"].sum())
    text = (
        f"{hours:.2f} of {measured:.2f} GPU-h with engine < {t.low_engine:.0%} "
        f"and DRAM active >= {t.memory_bound_dram:.0%}"
    )
    if hours > 0:
        text += f" (mean DRAM active {float(ev['memory_bound_dram_sum'].sum()) / hours:.0%})"
    return IdleFinding(namespace, MEMORY_BOUND, MEASURED, hours, _cost(ev, "memory_bound_h", price), text)


def _input_bound(
    namespace: str, ev: pd.DataFrame, price: dict[tuple[str, str], float], t: IdleThresholds
) -> IdleFinding:
    measured = float(ev["pcie_h"].sum()) if not ev.empty else 0.0
    if measured <= 0:
        why = (
            "PCIe traffic is per physical GPU: attributable to a pod only on a whole, unshared GPU, "
            "and it has none with PCIe samples"
        )
        return IdleFinding(namespace, INPUT_BOUND, NOT_MEASURED, None, None, why)
    hours = float(ev["input_bound_h"].sum())
    text = (
        f"{hours:.2f} of {measured:.2f} whole-GPU GPU-h with engine < {t.low_engine:.0%} "
        f"and PCIe rx >= {t.input_bound_pcie_rx / 1e9:g} GB/s"
    )
    if hours > 0:
        text += f" (mean rx {float(ev['input_bound_rx_sum'].sum()) / hours / 1e9:.2f} GB/s)"
    if float(ev.loc[ev["kind"] == MIG, "alloc_h"].sum()) > 0:
        text += "; its MIG instances are not measured (PCIe is per physical GPU)"
    return IdleFinding(namespace, INPUT_BOUND, MEASURED, hours, _cost(ev, "input_bound_h", price), text)


def _could_share(
    namespace: str, ev: pd.DataFrame, price: dict[tuple[str, str], float], t: IdleThresholds
) -> IdleFinding:
    whole = ev[ev["kind"] == WHOLE] if not ev.empty else ev
    if whole.empty:
        return IdleFinding(
            namespace, COULD_SHARE, NOT_APPLICABLE, None, None, "holds no whole GPU (MIG slices or MPS only)"
        )
    per_gpu = whole.groupby(["namespace", "pod", "container", "node", "gpu"], as_index=False)[
        list(EVIDENCE_SUMS)
    ].sum()
    if float(per_gpu["activity_h"].sum()) <= 0:
        return IdleFinding(
            namespace, COULD_SHARE, NOT_MEASURED, None, None, "no activity measured on its whole GPUs"
        )
    measured = per_gpu[per_gpu["activity_h"] > 0]
    fraction = measured["below_share_h"] / measured["activity_h"]
    chosen = measured[fraction >= t.share_min_fraction]
    candidates = tuple(
        {
            "pod": str(r["pod"]),
            "container": str(r["container"]),
            "node": str(r["node"]),
            "gpu": int(r["gpu"]),
            "gpuHours": float(r["alloc_h"]),
            "share_below": float(r["below_share_h"] / r["activity_h"]),
            "mean_activity": float(r["activity_sum"] / r["activity_h"]),
        }
        for r in chosen.to_dict("records")
    )
    hours = float(chosen["alloc_h"].sum())
    chosen_keys = set(zip(chosen["pod"], chosen["node"], chosen["gpu"], strict=True))
    in_chosen = [
        (p, n, g) in chosen_keys for p, n, g in zip(whole["pod"], whole["node"], whole["gpu"], strict=True)
    ]
    cost = _cost(whole[in_chosen], "alloc_h", price) if candidates else 0.0
    text = (
        f"{len(candidates)} of {len(measured)} whole GPUs held by its pods ran below {t.share_util:.0%} "
        f"for at least {t.share_min_fraction:.0%} of their time"
    )
    if candidates:
        text += ": " + "; ".join(
            f"{c['pod']} on {c['node']} GPU {c['gpu']} ({c['share_below']:.0%} of {c['gpuHours']:.2f} GPU-h, "
            f"mean {c['mean_activity']:.0%})"
            for c in candidates[:5]
        )
        if len(candidates) > 5:
            text += f"; and {len(candidates) - 5} more"
    return IdleFinding(namespace, COULD_SHARE, MEASURED, hours, cost, text, candidates)
