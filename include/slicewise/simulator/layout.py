"""The fleet flattened into arrays: slots, dcgm series and physical GPUs, in frame-key order.

Kept apart from :mod:`slicewise.simulator.fleet` (the configuration) because it is the one place that decides
identities: UUIDs, PCI bus ids, MIG instance ids, slot keys (the seeds of all noise) and the row order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from slicewise.simulator import noise

if TYPE_CHECKING:
    from slicewise.catalog.models import GpuModel
    from slicewise.simulator.fleet import Fleet, Node

KIND_WHOLE, KIND_MIG, KIND_MPS = 0, 1, 2
#: PCI bus numbers of the eight GPUs of a DGX A100/H100 board, so bus ids look like the real thing.
_PCI_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)


def resource_name(mig_profile: str) -> str:
    """kube-state-metrics' name of the extended resource a slot is requested as (mixed MIG strategy)."""
    if not mig_profile:
        return "nvidia_com_gpu"
    # device plugin: nvidia.com/mig-<profile> with '+' -> '.'; ksm: every [^a-zA-Z0-9_] -> '_'.
    return re.sub(r"[^a-zA-Z0-9_]", "_", "nvidia.com/mig-" + mig_profile.replace("+", "."))


@dataclass(frozen=True)
class Layout:
    """The fleet flattened into arrays. Slots are grouped by series, series by physical GPU, GPUs by node.

    Series are numbered in the order of the frame key (hostname, gpu, gpu_instance_id), which is also the
    order in which rows and exposition samples are written.
    """

    # slots (S)
    slot_key: np.ndarray  # int64 hash of the slot's name: the seed of all its noise
    slot_series: np.ndarray  # series index of each slot
    slot_workload: np.ndarray  # index into Fleet.workload_names
    slot_class: np.ndarray  # index into Fleet.class_names
    slot_capacity_mib: np.ndarray  # memory the slot may use (instance memory, GPU memory / MPS replicas)
    slot_local: np.ndarray  # number of the slot among its workload's slots (makes pod names unique)
    slot_resource: np.ndarray  # index into resources
    # series (R)
    series_node: np.ndarray
    series_gpu: np.ndarray  # GPU index on its node
    series_phys: np.ndarray  # physical GPU index
    series_kind: np.ndarray  # KIND_WHOLE | KIND_MIG | KIND_MPS
    series_capacity_mib: np.ndarray
    series_weight: np.ndarray  # share of the physical GPU's compute (g / compute slices; 1 for whole)
    series_slot_start: np.ndarray  # first slot of each series (for np.add.reduceat)
    series_profile: tuple[str, ...]
    series_instance_id: tuple[str, ...]
    # physical GPUs (P)
    phys_node: np.ndarray
    phys_gpu: np.ndarray
    phys_key: np.ndarray
    phys_tdp_w: np.ndarray
    phys_series_start: np.ndarray  # series are grouped by physical GPU
    phys_uuid: tuple[str, ...]
    phys_pci_bus_id: tuple[str, ...]
    resources: tuple[str, ...]
    #: bits of the per-workload pod counter that pod names encode (see frames.pod_names)
    pod_index_bits: int

    @property
    def n_slots(self) -> int:
        return len(self.slot_key)

    @property
    def n_series(self) -> int:
        return len(self.series_node)

    @property
    def n_phys(self) -> int:
        return len(self.phys_node)


def _series_of_gpu(node: Node, gpu: int, model: GpuModel) -> list[tuple[int, str, str, int, float, int]]:
    """``(kind, profile, instance id, capacity MiB, compute weight, slots)`` of each series of GPU ``gpu``."""
    if not node.gpu_has_mig(gpu):
        kind = KIND_MPS if node.mps_replicas else KIND_WHOLE
        return [(kind, "", "", model.memory_mib, 1.0, max(1, node.mps_replicas))]
    instances = [(p, model.profiles[p]) for p, count in node.mig_devices for _ in range(count)]
    # Largest instances first, ids counted from 1 (0 for a full 7g instance): a readable stand-in for NVML's
    # placement-derived GPU instance ids, which differ by driver.
    instances.sort(key=lambda item: (-item[1].g, -item[1].mem_slices, item[0]))
    out = []
    for i, (name, spec) in enumerate(instances):
        gi_id = 0 if spec.g == model.compute_slices else i + 1
        out.append((KIND_MIG, name, str(gi_id), spec.memory_mib, spec.g / model.compute_slices, 1))
    return out


def build_layout(fleet: Fleet) -> Layout:
    """The fleet's slots, series and physical GPUs as arrays (see :class:`Layout`)."""
    workload_index = {name: i for i, name in enumerate(fleet.workload_names)}
    class_index = {name: i for i, name in enumerate(fleet.class_names)}
    resources: dict[str, int] = {}
    slots: list[tuple[int, int, int, int, float, int]] = []
    series: list[tuple[int, int, int, int, float, float, int, str, str]] = []
    phys: list[tuple[int, int, int, float, int, str, str]] = []
    per_workload = dict.fromkeys(fleet.workload_names, 0)
    # Sort by the frame key so rows come out in the order the ingest sorts them (hostname, gpu, instance id).
    for node_no, node in sorted(enumerate(fleet.nodes), key=lambda item: item[1].name):
        model = fleet.models[node.model]
        turn = 0
        for gpu in range(node.gpus):
            gpu_name = f"{fleet.seed}/{node.name}/{gpu}"
            p = len(phys)
            uuid = noise.stable_hex("uuid/" + gpu_name, 32)
            phys.append((
                node_no, gpu, noise.stable_key(gpu_name), model.tdp_w, len(series),
                f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}",
                f"00000000:{_PCI_BUSES[gpu % 8] + gpu // 8:02X}:00.0",
            ))  # fmt: skip
            gpu_series = sorted(_series_of_gpu(node, gpu, model), key=lambda s: s[2])
            for kind, profile, gi_id, capacity, weight, n_slots in gpu_series:
                r = len(series)
                series.append((node_no, gpu, p, kind, capacity, weight, len(slots), profile, gi_id))
                res = resources.setdefault(resource_name(profile), len(resources))
                for k in range(n_slots):
                    workload = node.workloads[turn % len(node.workloads)]
                    turn += 1
                    slot_name = f"{gpu_name}/{gi_id or 'gpu'}/{k}"
                    cap = capacity / n_slots  # MPS pins each client to an equal share of memory
                    wl = workload_index[workload]
                    cls = class_index[fleet.workloads[workload].workload_class]
                    slots.append((noise.stable_key(slot_name), r, wl, cls, cap, res))
                    per_workload[workload] += 1
    slot_arr = np.array([s[:4] for s in slots], dtype=np.int64).reshape(-1, 4)
    local = np.zeros(len(slots), dtype=np.int64)
    seen: dict[int, int] = {}
    for i, wl in enumerate(slot_arr[:, 2].tolist()):
        local[i] = seen.get(wl, 0)
        seen[wl] = local[i] + 1
    # Pod names encode (workload slot or pending number, epoch mod 256); pending pods number after the slots.
    biggest = max(per_workload.values(), default=1)
    pod_index_bits = max(1, math.ceil(math.log2(2 * biggest + 1)))
    return Layout(
        slot_key=slot_arr[:, 0],
        slot_series=slot_arr[:, 1],
        slot_workload=slot_arr[:, 2],
        slot_class=slot_arr[:, 3],
        slot_capacity_mib=np.array([s[4] for s in slots], dtype=np.float64),
        slot_local=local,
        slot_resource=np.array([s[5] for s in slots], dtype=np.int64),
        series_node=np.array([s[0] for s in series], dtype=np.int64),
        series_gpu=np.array([s[1] for s in series], dtype=np.int64),
        series_phys=np.array([s[2] for s in series], dtype=np.int64),
        series_kind=np.array([s[3] for s in series], dtype=np.int64),
        series_capacity_mib=np.array([s[4] for s in series], dtype=np.float64),
        series_weight=np.array([s[5] for s in series], dtype=np.float64),
        series_slot_start=np.array([s[6] for s in series], dtype=np.int64),
        series_profile=tuple(s[7] for s in series),
        series_instance_id=tuple(s[8] for s in series),
        phys_node=np.array([p[0] for p in phys], dtype=np.int64),
        phys_gpu=np.array([p[1] for p in phys], dtype=np.int64),
        phys_key=np.array([p[2] for p in phys], dtype=np.int64),
        phys_tdp_w=np.array([p[3] for p in phys], dtype=np.float64),
        phys_series_start=np.array([p[4] for p in phys], dtype=np.int64),
        phys_uuid=tuple(p[5] for p in phys),
        phys_pci_bus_id=tuple(p[6] for p in phys),
        resources=tuple(resources),
        pod_index_bits=pod_index_bits,
    )
