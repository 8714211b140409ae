"""What the simulated fleet looks like at given timestamps: rows of GPU samples and of GPU demand.

``gpu_rows`` / ``demand_rows`` are the internal tables (dicts of numpy arrays, with helper columns) that the
exporter and the backfill render; ``gpu_samples`` / ``demand`` are the same data as the frames of
:mod:`slicewise.schema`, which is what a Prometheus read of the exported series must reproduce.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise import schema
from slicewise.simulator import noise
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.layout import KIND_MPS
from slicewise.simulator.load import activity, as_timestamps, demand_level, series_load, slot_load

if TYPE_CHECKING:
    import pandas as pd

#: A table: column name -> 1-D array, all of one length. Object arrays hold Python str.
Rows = dict[str, np.ndarray]

_UID_A, _UID_B, _PENDING_COUNT = 301, 302, 303
#: Pod names carry (slot or pending number, epoch mod 2**_EPOCH_BITS) through a bijection, so two pods
#: running at the same time never share a name.
_EPOCH_BITS = 8


def take(rows: Rows, index: np.ndarray) -> Rows:
    """Rows at ``index`` (integer positions or a boolean mask)."""
    return {name: col[index] for name, col in rows.items()}


def concat(*tables: Rows) -> Rows:
    """Tables stacked in order (same columns)."""
    return {name: np.concatenate([t[name] for t in tables]) for name in tables[0]}


def n_rows(rows: Rows) -> int:
    return len(next(iter(rows.values())))


# -- pods -------------------------------------------------------------------------------------------------
def _hex_width(fleet: Fleet) -> int:
    return max(5, math.ceil((fleet.layout.pod_index_bits + _EPOCH_BITS) / 4))


def pod_names(fleet: Fleet, workload: np.ndarray, number: np.ndarray, epoch: np.ndarray) -> list[str]:
    """``<workload>-<hex>`` for each (workload index, pod number, epoch).

    The hex part is a bijection of (number, epoch mod 256): pods of one workload that run at the same time
    have different numbers, hence different names, yet names look random like Kubernetes' suffixes.
    """
    width = _hex_width(fleet)
    packed = (np.asarray(number, dtype=np.int64) << _EPOCH_BITS) | (np.asarray(epoch) & (2**_EPOCH_BITS - 1))
    codes = noise.scramble(packed, 4 * width, fleet.seed).tolist()
    names = fleet.workload_names
    return [f"{names[w]}-{c:0{width}x}" for w, c in zip(np.asarray(workload).tolist(), codes, strict=True)]


def pod_uids(key: np.ndarray, epoch: np.ndarray) -> list[str]:
    """Kubernetes-style UUIDs for each (key, epoch)."""
    a = noise.mix(key, _UID_A, epoch).tolist()
    b = noise.mix(key, _UID_B, epoch).tolist()
    out = []
    for x, y in zip(a, b, strict=True):
        h = f"{x:016x}{y:016x}"
        out.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}")
    return out


def _unique_pairs(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (first, second) pairs of two int arrays (first >= 0), and the pair number of each input."""
    low = second.min()
    span = int(second.max() - low) + 1
    keys, inverse = np.unique(first.astype(np.int64) * span + (second - low), return_inverse=True)
    return keys // span, keys % span + low, inverse.reshape(-1)


def _strings(values: list[str]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# -- GPU rows ---------------------------------------------------------------------------------------------
def gpu_rows(fleet: Fleet, timestamps: Any) -> Rows:
    """One row per (series, timestamp), series-major in frame-key order, time ascending within a series.

    Columns: the schema's label and field columns (``timestamp`` as int64 unix seconds), plus ``pci_bus_id``,
    ``kind`` (KIND_*), ``phys`` (physical GPU number) and ``device_row`` (True on the one row per physical GPU
    and timestamp that carries the device-level fields in the exposition).
    """
    layout = fleet.layout
    ts = as_timestamps(timestamps)
    load = series_load(fleet, ts)
    n_t, n_r = len(ts), layout.n_series

    def series_major(values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values.T).reshape(-1)

    def per_row(per_series_values: np.ndarray) -> np.ndarray:
        return np.repeat(per_series_values, n_t)

    # Pod labels: dcgm-exporter attributes a whole GPU or MIG instance to its pod, never an MPS GPU (§3.4).
    starts = layout.series_slot_start
    present = load.slots.present[:, starts] & (layout.series_kind != KIND_MPS)[None, :]
    epoch = load.slots.epoch[:, starts]
    pod = np.full((n_t, n_r), "", dtype=object)
    namespace = np.full((n_t, n_r), "", dtype=object)
    container = np.full((n_t, n_r), "", dtype=object)
    ti, ri = np.nonzero(present)
    if len(ti):
        series_no, pod_epoch, inverse = _unique_pairs(ri, epoch[ti, ri])
        slot = starts[series_no]
        workload = layout.slot_workload[slot]
        names = _strings(pod_names(fleet, workload, layout.slot_local[slot], pod_epoch))
        pod[ti, ri] = names[inverse]
        wl_objs = [fleet.workloads[w] for w in fleet.workload_names]
        namespace[ti, ri] = _strings([w.namespace for w in wl_objs])[workload][inverse]
        container[ti, ri] = _strings([w.container for w in wl_objs])[workload][inverse]

    node_names = _strings([fleet.nodes[i].name for i in range(len(fleet.nodes))])
    models = _strings([fleet.models[node.model].dcgm_model_name for node in fleet.nodes])
    phys = layout.series_phys
    first_of_phys = np.zeros(n_r, dtype=bool)
    first_of_phys[layout.phys_series_start] = True
    return {
        schema.TIMESTAMP: np.tile(ts, n_r),
        "hostname": per_row(node_names[layout.series_node]),
        "gpu": per_row(layout.series_gpu),
        "uuid": per_row(_strings(list(layout.phys_uuid))[phys]),
        "model_name": per_row(models[layout.series_node]),
        "mig_profile": per_row(_strings(list(layout.series_profile))),
        "gpu_instance_id": per_row(_strings(list(layout.series_instance_id))),
        "namespace": series_major(namespace),
        "pod": series_major(pod),
        "container": series_major(container),
        "gpu_util": series_major(load.gpu_util),
        "engine_active": series_major(load.engine),
        "dram_active": series_major(load.dram),
        "fb_used_mib": series_major(load.fb_used_mib),
        "fb_free_mib": series_major(load.fb_free_mib),
        "power_w": series_major(load.power_w[:, phys]),
        "pcie_tx_bytes_per_s": series_major(load.pcie_tx[:, phys]),
        "pcie_rx_bytes_per_s": series_major(load.pcie_rx[:, phys]),
        "pci_bus_id": per_row(_strings(list(layout.phys_pci_bus_id))[phys]),
        "kind": per_row(layout.series_kind),
        "phys": per_row(phys),
        "device_row": per_row(first_of_phys),
    }


def _utc(seconds: np.ndarray) -> pd.DatetimeIndex:
    import pandas as pd

    return pd.DatetimeIndex(np.asarray(seconds, dtype=np.int64) * 10**9, dtype="datetime64[ns]").tz_localize(
        "UTC"
    )


def gpu_frame(rows: Rows) -> pd.DataFrame:
    """The schema's GPU sample frame of a rows table (columns ``schema.GPU_COLUMNS``, ``schema.GPU_DTYPES``)."""
    import pandas as pd

    data = {name: rows[name] for name in schema.GPU_COLUMNS if name != schema.TIMESTAMP}
    frame = pd.DataFrame({schema.TIMESTAMP: _utc(rows[schema.TIMESTAMP]), **data})
    return frame.astype(schema.GPU_DTYPES)


def gpu_samples(fleet: Fleet, timestamps: Any) -> pd.DataFrame:
    """The GPU sample frame the fleet exports at ``timestamps`` (unix seconds).

    One row per (timestamp, GPU series): a whole GPU, an MPS-shared GPU or a MIG instance. Rows are sorted by
    ``schema.GPU_KEY`` then time (as the Prometheus reader sorts them). ``gpu_util`` is NaN on MIG instances;
    power and PCIe are the physical GPU's, repeated on each of its MIG instances; pod labels are "" on idle
    slots and on MPS GPUs.
    """
    return gpu_frame(gpu_rows(fleet, timestamps))


# -- demand rows ------------------------------------------------------------------------------------------
def _pending(fleet: Fleet, ts: np.ndarray) -> Rows:
    """Unschedulable pods: the demand above each workload's slot count, re-drawn every pending window."""
    layout = fleet.layout
    classes = [fleet.classes[name] for name in fleet.class_names]
    window = ts // fleet.pending_window_s
    parts: list[Rows] = []
    for w_index, w_name in enumerate(fleet.workload_names):
        slots = np.flatnonzero(layout.slot_workload == w_index)
        if not len(slots):
            continue
        cls_no = fleet.class_names.index(fleet.workloads[w_name].workload_class)
        cls = classes[cls_no]
        act = activity(window * fleet.pending_window_s, classes, np.full(len(ts), cls_no), fleet.cycle)
        demand = demand_level(np.float64(cls.mean_demand), np.float64(cls.demand_swing), act)
        w_key = noise.stable_key(f"{fleet.seed}/pending/{w_name}")
        dither = noise.uniform(w_key, _PENDING_COUNT, window)
        count = np.minimum(np.floor(np.maximum(demand - 1.0, 0.0) * len(slots) + dither), len(slots))
        ti, k = np.nonzero(np.arange(len(slots))[None, :] < count[:, None])
        if not len(ti):
            continue
        slot = slots[k]  # the k-th pending pod asks for what the workload's k-th slot offers
        names = pod_names(fleet, np.full(len(k), w_index), len(slots) + k, window[ti])
        parts.append({
            schema.TIMESTAMP: ts[ti],
            "workload": np.full(len(k), w_index),
            "pod": _strings(names),
            "uid": _strings(pod_uids(noise.mix(w_key, k), window[ti])),
            "node": np.full(len(k), "", dtype=object),
            "resource": _strings(list(layout.resources))[layout.slot_resource[slot]],
            "unschedulable": np.ones(len(k), dtype=bool),
        })  # fmt: skip
    return concat(*parts) if parts else {}


def demand_rows(fleet: Fleet, timestamps: Any) -> Rows:
    """One row per (timestamp, pod) requesting a GPU resource: running pods and pending (unschedulable) ones.

    Running pods come first (slot by slot), then pending ones. Columns: the schema's demand columns
    (``timestamp`` as int64 unix seconds) plus the pod ``uid``.
    """
    layout = fleet.layout
    ts = as_timestamps(timestamps)
    state = slot_load(fleet, ts)
    ti, si = np.nonzero(state.present)
    node_names = _strings([node.name for node in fleet.nodes])
    running: Rows = {
        schema.TIMESTAMP: ts[ti],
        "workload": layout.slot_workload[si],
        "pod": _strings([]),
        "uid": _strings([]),
        "node": node_names[layout.series_node[layout.slot_series[si]]],
        "resource": _strings(list(layout.resources))[layout.slot_resource[si]],
        "unschedulable": np.zeros(len(ti), dtype=bool),
    }
    if len(ti):
        slot, pod_epoch, inverse = _unique_pairs(si, state.epoch[ti, si])
        names = _strings(pod_names(fleet, layout.slot_workload[slot], layout.slot_local[slot], pod_epoch))
        uids = _strings(pod_uids(layout.slot_key[slot], pod_epoch))
        running["pod"] = names[inverse]
        running["uid"] = uids[inverse]
    pending = _pending(fleet, ts)
    rows = concat(running, pending) if pending else running
    wl_objs = [fleet.workloads[w] for w in fleet.workload_names]
    rows["namespace"] = _strings([w.namespace for w in wl_objs])[rows["workload"]]
    rows["container"] = _strings([w.container for w in wl_objs])[rows["workload"]]
    rows["requested"] = np.ones(n_rows(rows), dtype=np.float64)
    shares = [np.nan if w.gpu_share is None else w.gpu_share for w in wl_objs]
    rows["declared_share"] = np.array(shares, dtype=np.float64)[rows["workload"]]
    for form in schema.DEMAND_SELECTORS:
        rows[form] = _strings([getattr(w, form) for w in wl_objs])[rows["workload"]]
    rows["eviction_opt_in"] = np.array([w.evictable for w in wl_objs], dtype=bool)[rows["workload"]]
    del rows["workload"]
    return rows


def demand_frame(rows: Rows) -> pd.DataFrame:
    """The schema's demand frame of a demand rows table."""
    import pandas as pd

    data = {name: rows[name] for name in schema.DEMAND_COLUMNS if name != schema.TIMESTAMP}
    frame = pd.DataFrame({schema.TIMESTAMP: _utc(rows[schema.TIMESTAMP]), **data})
    frame = frame.astype(schema.DEMAND_DTYPES)
    return frame.sort_values([schema.TIMESTAMP, *schema.DEMAND_LABELS], ignore_index=True)


def demand(fleet: Fleet, timestamps: Any) -> pd.DataFrame:
    """The demand frame the fleet exports at ``timestamps``: each running pod's GPU request (node set) and
    each pending pod's (node "", unschedulable True). Sorted by timestamp then the demand labels."""
    return demand_frame(demand_rows(fleet, timestamps))
