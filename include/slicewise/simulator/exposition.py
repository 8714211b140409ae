"""The series the fleet exposes, as dcgm-exporter and kube-state-metrics name and label them.

Both the live exporter and the OpenMetrics backfill render :class:`FamilySamples` built here, so the two can
only differ in transport, never in names, labels or values.

dcgm-exporter (NVIDIA/dcgm-exporter): label order ``gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID],
Hostname, [container, namespace, pod]``; MIG labels only on MIG instances; pod labels only when the exporter can
attribute the device to a pod; ``DCGM_FI_DEV_GPU_UTIL`` is not exported for MIG instances; power and PCIe are
per physical GPU (one series, no MIG labels, no pod labels on a MIG GPU).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slicewise import schema
from slicewise.simulator.faults import Faults
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.frames import Rows, demand_rows, gpu_rows, n_rows
from slicewise.simulator.layout import KIND_MIG

#: HELP texts as dcgm-exporter's counter CSV and kube-state-metrics write them.
HELP: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_DRAM_ACTIVE": "Ratio of cycles the device memory interface is active sending or receiving data.",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "The rate of data transmitted over the PCIe bus - including both protocol "
    "headers and data payloads - in bytes per second.",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "The rate of data received over the PCIe bus - including both protocol "
    "headers and data payloads - in bytes per second.",
    schema.KSM_REQUESTS: "The number of requested request resource by a container. It is recommended to use the "
    "kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise.",
    schema.KSM_UNSCHEDULABLE: "Describes the unschedulable status for the pod.",
    schema.KSM_POD_ANNOTATIONS: "Kubernetes annotations converted to Prometheus labels.",
    schema.KSM_POD_NODESELECTORS: "Describes the Pod nodeSelectors.",
    schema.KSM_NODE_CAPACITY: "The capacity for different resources of a node.",
    schema.KSM_NODE_ALLOCATABLE: "The allocatable for different resources of a node that are available for "
    "scheduling.",
}

HOSTNAME_LABELS = ("Hostname", "hostname")
#: Every label name the exporter writes (scrape target labels must not collide with them).
EXPORTED_LABELS = frozenset(
    {"gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", *HOSTNAME_LABELS}
    | {"container", "namespace", "pod", "uid", "node", "resource", "unit"}
    | {schema.SHARE_ANNOTATION_LABEL, schema.EVICTABLE_ANNOTATION_LABEL, *schema.SELECTOR_LABELS.values()}
)
LabelSet = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FamilySamples:
    """The samples of one metric family: sample i has labels ``label_sets[codes[i]]``, all gauges."""

    name: str
    label_sets: list[LabelSet]
    codes: np.ndarray
    values: np.ndarray
    timestamps: np.ndarray  # unix seconds

    @property
    def help(self) -> str:
        return HELP[self.name]

    def __len__(self) -> int:
        return len(self.codes)


def _factorize(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One integer code per distinct tuple of ``columns`` and the first row of each code."""
    import pandas as pd

    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        codes, uniques = pd.factorize(column)
        # Re-factorise after each column so the combined code stays small whatever the column count.
        key, _ = pd.factorize(key * len(uniques) + codes)
    _, first = np.unique(key, return_index=True)
    return key.astype(np.int64), first


def _merge_equal_label_sets(codes: np.ndarray, sets: list[LabelSet]) -> tuple[np.ndarray, list[LabelSet]]:
    """One code per distinct label set.

    Different column values can render the same labels (a MIG GPU's device-level series drops the pod
    labels), and one series must be one code: the backfill writes each code's samples as one run in time
    order, and promtool rejects a series whose samples go back in time.
    """
    canonical: dict[LabelSet, int] = {}
    remap = np.array([canonical.setdefault(labels, len(canonical)) for labels in sets], dtype=np.int64)
    return (remap[codes] if len(codes) else codes), list(canonical)


_GPU_LABEL_COLUMNS = ("gpu", "uuid", "pci_bus_id", "model_name", "hostname", "mig_profile", "gpu_instance_id")
_POD_COLUMNS = ("container", "namespace", "pod")


def _dcgm_labels(rows: Rows, i: int, *, device_level: bool, hostname_label: str) -> LabelSet:
    gpu = str(rows["gpu"][i])
    pairs = [
        ("gpu", gpu),
        ("UUID", rows["uuid"][i]),
        ("pci_bus_id", rows["pci_bus_id"][i]),
        ("device", f"nvidia{gpu}"),
    ]
    if rows["model_name"][i]:
        pairs.append(("modelName", rows["model_name"][i]))
    mig = rows["kind"][i] == KIND_MIG
    if mig and not device_level:
        pairs += [("GPU_I_PROFILE", rows["mig_profile"][i]), ("GPU_I_ID", rows["gpu_instance_id"][i])]
    if rows["hostname"][i]:
        pairs.append((hostname_label, rows["hostname"][i]))
    # A MIG GPU's device-level series belongs to no single pod (pods are attributed per MIG device).
    if rows["pod"][i] and not (mig and device_level):
        pairs += [(name, rows[name][i]) for name in _POD_COLUMNS]
    return tuple(pairs)


def gpu_families(rows: Rows, hostname_label: str = "Hostname") -> list[FamilySamples]:
    """dcgm-exporter families (``schema.GPU_FIELDS``) of a GPU rows table (see ``frames.gpu_rows``)."""
    if hostname_label not in HOSTNAME_LABELS:
        raise ValueError(f"hostname_label must be one of {HOSTNAME_LABELS}, got {hostname_label!r}")
    everything = np.arange(n_rows(rows))
    device_rows = np.flatnonzero(rows["device_row"])
    label_cache: dict[bool, tuple[np.ndarray, np.ndarray, list[LabelSet]]] = {}
    for device_level, index in ((False, everything), (True, device_rows)):
        columns = [rows[c][index] for c in (*_GPU_LABEL_COLUMNS, *_POD_COLUMNS)]
        codes, first = _factorize(columns) if len(index) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        sets = [
            _dcgm_labels(rows, int(index[j]), device_level=device_level, hostname_label=hostname_label)
            for j in first.tolist()
        ]
        codes, sets = _merge_equal_label_sets(codes, sets)
        label_cache[device_level] = (index, codes, sets)

    families = []
    not_mig = rows["kind"] != KIND_MIG
    for column, (metric, level) in schema.GPU_FIELDS.items():
        index, codes, sets = label_cache[level == "device"]
        if column == "gpu_util":  # dcgm-exporter has no GPU_UTIL for MIG instances
            keep = not_mig[index]
            index, codes = index[keep], codes[keep]
        families.append(
            FamilySamples(metric, sets, codes, rows[column][index], rows[schema.TIMESTAMP][index])
        )
    return families


def ksm_families(fleet: Fleet, demand: Rows, timestamps: np.ndarray) -> list[FamilySamples]:
    """kube-state-metrics families: per-container GPU requests, unschedulable pods, node GPU capacity."""
    n = n_rows(demand)
    req_cols = ("namespace", "pod", "uid", "container", "node", "resource")
    codes, first = (
        _factorize([demand[c] for c in req_cols]) if n else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    )
    req_sets = [(*((c, str(demand[c][i])) for c in req_cols), ("unit", "integer")) for i in first.tolist()]
    families = [
        FamilySamples(schema.KSM_REQUESTS, req_sets, codes, demand["requested"], demand[schema.TIMESTAMP])
    ]

    # kube-state-metrics emits kube_pod_status_unschedulable only for pods whose PodScheduled is False.
    pending = np.flatnonzero(demand["unschedulable"])
    pod_cols = ("namespace", "pod", "uid")
    if len(pending):
        p_codes, p_first = _factorize([demand[c][pending] for c in pod_cols])
        p_sets = [tuple((c, str(demand[c][pending[i]])) for c in pod_cols) for i in p_first.tolist()]
    else:
        p_codes, p_sets = np.zeros(0, np.int64), []
    families.append(
        FamilySamples(
            schema.KSM_UNSCHEDULABLE,
            p_sets,
            p_codes,
            np.ones(len(pending)),
            demand[schema.TIMESTAMP][pending],
        )
    )

    families += _pod_form_families(demand)

    capacity = sorted(fleet.node_capacity().items())
    node_sets: list[LabelSet] = [
        (("node", n_), ("resource", r), ("unit", "integer")) for (n_, r), _ in capacity
    ]
    counts = np.array([c for _, c in capacity], dtype=np.float64)
    n_t = len(timestamps)
    node_codes = np.repeat(np.arange(len(capacity)), n_t)
    for name in (schema.KSM_NODE_CAPACITY, schema.KSM_NODE_ALLOCATABLE):
        families.append(
            FamilySamples(
                name, node_sets, node_codes, np.repeat(counts, n_t), np.tile(timestamps, len(capacity))
            )
        )
    return families


def _pod_form_families(demand: Rows) -> list[FamilySamples]:
    """``kube_pod_annotations`` (allowlisted ``slicewise.io/gpu-share`` and ``slicewise.io/evictable``) and
    ``kube_pod_nodeselectors`` (the GPU labels of ``schema.SELECTOR_LABELS``), each family's labels on one series
    per pod as kube-state-metrics writes them, of the pods that carry them, one sample per pod and instant."""
    out = []
    shares = np.array([f"{v:g}" if not math.isnan(v) else "" for v in demand["declared_share"]], dtype=object)
    opted_in = np.where(demand["eviction_opt_in"], "true", "").astype(object)
    annotations = ((schema.SHARE_ANNOTATION_LABEL, shares), (schema.EVICTABLE_ANNOTATION_LABEL, opted_in))
    forms = (
        (schema.KSM_POD_ANNOTATIONS, annotations),
        (
            schema.KSM_POD_NODESELECTORS,
            tuple((label, demand[form]) for form, label in schema.SELECTOR_LABELS.items()),
        ),
    )
    pod_cols = ("namespace", "pod", "uid")
    for family, labelled in forms:
        rows = np.flatnonzero(np.logical_or.reduce([values != "" for _, values in labelled]))
        if len(rows):
            values = [v[rows] for _, v in labelled]
            # One sample per pod and instant, however many containers the pod has.
            columns = [demand[c][rows] for c in pod_cols] + values + [demand[schema.TIMESTAMP][rows]]
            _, first = _factorize(columns)
            rows = rows[np.sort(first)]
            values = [v[rows] for _, v in labelled]
            codes, firsts = _factorize([demand[c][rows] for c in pod_cols] + values)
            sets = [
                (
                    *((c, str(demand[c][rows[i]])) for c in pod_cols),
                    *(
                        (label, str(v[i]))
                        for (label, _), v in zip(labelled, values, strict=True)
                        if v[i] != ""
                    ),
                )
                for i in firsts.tolist()
            ]
        else:
            codes, sets = np.zeros(0, np.int64), []
        out.append(FamilySamples(family, sets, codes, np.ones(len(rows)), demand[schema.TIMESTAMP][rows]))
    return out


def families_at(
    fleet: Fleet, timestamps: np.ndarray, faults: Faults | None = None, hostname_label: str = "Hostname"
) -> list[FamilySamples]:
    """Every exported family (dcgm-exporter then kube-state-metrics) at ``timestamps``."""
    rows = gpu_rows(fleet, timestamps)
    if faults is not None:
        rows = faults.apply(rows)
    return [
        *gpu_families(rows, hostname_label),
        *ksm_families(fleet, demand_rows(fleet, timestamps), np.asarray(timestamps)),
    ]
