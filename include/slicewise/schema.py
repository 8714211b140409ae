"""Column contracts of the tidy frames that travel between ingest, validation, storage and the forecaster.

A *GPU sample* row is one (timestamp, physical GPU or MIG instance) pair. A *demand* row is one (timestamp,
pod container, extended resource) pair from kube-state-metrics. Both are plain pandas frames; these names and
dtypes are the contract that the simulator, the Prometheus reader and the Great Expectations suite share.
"""

from __future__ import annotations

from typing import Final

TIMESTAMP: Final = "timestamp"

#: Identity of one GPU series: a physical GPU (`gpu_instance_id == ""`) or a MIG instance on it.
GPU_KEY: Final = ("hostname", "gpu", "gpu_instance_id")

#: Labels describing a GPU series (strings; "" when the exporter did not set the label).
GPU_LABELS: Final = (
    "hostname",
    "gpu",
    "uuid",
    "model_name",
    "mig_profile",
    "gpu_instance_id",
    "namespace",
    "pod",
    "container",
)

#: DCGM fields per series: frame column -> (DCGM metric name, attached per MIG instance or per physical GPU).
#: Device-level fields (power, PCIe) have no MIG instance labels; their value is joined onto every row of the
#: physical GPU so each row is complete.
GPU_FIELDS: Final[dict[str, tuple[str, str]]] = {
    "gpu_util": ("DCGM_FI_DEV_GPU_UTIL", "instance"),  # percent 0-100; not exported for MIG instances -> NaN
    "engine_active": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "instance"),  # ratio 0-1
    "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE", "instance"),  # ratio 0-1
    "fb_used_mib": ("DCGM_FI_DEV_FB_USED", "instance"),  # MiB
    "fb_free_mib": ("DCGM_FI_DEV_FB_FREE", "instance"),  # MiB
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", "device"),  # W, per physical GPU
    "pcie_tx_bytes_per_s": ("DCGM_FI_PROF_PCIE_TX_BYTES", "device"),  # bytes/s, per physical GPU
    "pcie_rx_bytes_per_s": ("DCGM_FI_PROF_PCIE_RX_BYTES", "device"),  # bytes/s, per physical GPU
}

GPU_COLUMNS: Final = (TIMESTAMP, *GPU_LABELS, *GPU_FIELDS)

#: pandas dtypes of the GPU sample frame as stored in Parquet.
GPU_DTYPES: Final[dict[str, str]] = {
    TIMESTAMP: "datetime64[ns, UTC]",
    **{label: "string" for label in GPU_LABELS if label != "gpu"},
    "gpu": "int64",
    **dict.fromkeys(GPU_FIELDS, "float64"),
}

#: kube-state-metrics demand frame.
DEMAND_LABELS: Final = ("namespace", "pod", "container", "node", "resource")
#: The forms a pod accepts beyond its resource requests (planning.demand): its declared share of a GPU, and the
#: GPU product, sharing strategy and replicas its nodeSelector names. Partitions written before these columns
#: existed read as none of them.
DEMAND_FORMS: Final = ("declared_share", "gpu_product", "gpu_sharing", "gpu_replicas")
#: The string-valued forms ("" where the pod names none).
DEMAND_SELECTORS: Final = ("gpu_product", "gpu_sharing", "gpu_replicas")
DEMAND_COLUMNS: Final = (
    TIMESTAMP,
    *DEMAND_LABELS,
    "requested",
    "unschedulable",
    *DEMAND_FORMS,
    "eviction_opt_in",
)
DEMAND_DTYPES: Final[dict[str, str]] = {
    TIMESTAMP: "datetime64[ns, UTC]",
    **dict.fromkeys(DEMAND_LABELS, "string"),
    "requested": "float64",  # units of the resource (whole GPUs, MIG slices or MPS replicas)
    "unschedulable": "bool",  # kube_pod_status_unschedulable == 1 at that instant
    "declared_share": "float64",  # the pod's slicewise.io/gpu-share annotation; NaN when it has none
    "gpu_product": "string",  # its nodeSelector's nvidia.com/gpu.product; "" when it names none
    "gpu_sharing": "string",  # its nodeSelector's nvidia.com/gpu.sharing-strategy (none, mps, time-slicing)
    "gpu_replicas": "string",  # its nodeSelector's nvidia.com/gpu.replicas (replicas per GPU)
    # The pod carries slicewise.io/evictable=true (as kube-state-metrics exports it; partitions written before the
    # column existed read as no pod opted in). The what-if review replays only these pods as evictable.
    "eviction_opt_in": "bool",
}

#: kube-state-metrics series names used for demand.
KSM_REQUESTS: Final = "kube_pod_container_resource_requests"
KSM_UNSCHEDULABLE: Final = "kube_pod_status_unschedulable"
KSM_NODE_CAPACITY: Final = "kube_node_status_capacity"
KSM_NODE_ALLOCATABLE: Final = "kube_node_status_allocatable"
#: Exported only when kube-state-metrics runs with
#: ``--metric-annotations-allowlist=pods=[slicewise.io/gpu-share,slicewise.io/evictable]``.
KSM_POD_ANNOTATIONS: Final = "kube_pod_annotations"
#: Opt-in: ``--metric-opt-in-list=kube_pod_nodeselectors``.
KSM_POD_NODESELECTORS: Final = "kube_pod_nodeselectors"
#: The annotation a pod declares its share of one GPU with, in (0, 1] (see planning.demand).
GPU_SHARE_ANNOTATION: Final = "slicewise.io/gpu-share"
#: The labels kube-state-metrics gives them (``/``, ``.`` and ``-`` sanitised to ``_``).
SHARE_ANNOTATION_LABEL: Final = "annotation_slicewise_io_gpu_share"
#: The annotation a pod opts in to Slicewise's evictions with (value "true"), and its kube-state-metrics label.
EVICTABLE_ANNOTATION: Final = "slicewise.io/evictable"
EVICTABLE_ANNOTATION_LABEL: Final = "annotation_slicewise_io_evictable"
PRODUCT_SELECTOR_LABEL: Final = "nodeselector_nvidia_com_gpu_product"
SHARING_SELECTOR_LABEL: Final = "nodeselector_nvidia_com_gpu_sharing_strategy"
REPLICAS_SELECTOR_LABEL: Final = "nodeselector_nvidia_com_gpu_replicas"
#: Each string-valued demand form and the GPU feature discovery node label a pod's nodeSelector names for it.
SELECTOR_NODE_LABELS: Final = {
    "gpu_product": "nvidia.com/gpu.product",
    "gpu_sharing": "nvidia.com/gpu.sharing-strategy",  # none, mps or time-slicing
    "gpu_replicas": "nvidia.com/gpu.replicas",  # replicas per GPU, "1" unshared
}
#: What GPU feature discovery writes in ``nvidia.com/gpu.sharing-strategy`` ("": a pod that pins none).
SHARING_STRATEGIES: Final = ("", "none", "mps", "time-slicing")
#: Each string-valued demand form and the kube-state-metrics label it is read from.
SELECTOR_LABELS: Final = {
    "gpu_product": PRODUCT_SELECTOR_LABEL,
    "gpu_sharing": SHARING_SELECTOR_LABEL,
    "gpu_replicas": REPLICAS_SELECTOR_LABEL,
}
#: ``nvidia.com/gpu`` as kube-state-metrics names it.
KSM_GPU: Final = "nvidia_com_gpu"
#: The most one pod can ask: GPUs (the largest nodes hold 8-16), and MIG instances or shared replicas (7 MIG
#: instances or up to 48 MPS / time-slicing replicas per GPU, 16 GPUs). More is a broken series.
MAX_GPUS_PER_POD: Final = 16
MAX_SHARES_PER_POD: Final = 16 * 48
#: GPU extended resources as kube-state-metrics sanitises them (`nvidia.com/mig-1g.10gb` -> `nvidia_com_mig_1g_10gb`).
GPU_RESOURCE_REGEX: Final = "nvidia_com_(gpu|mig_.*)"


def parse_gpu_share(raw: str | None) -> float | None:
    """A ``slicewise.io/gpu-share`` value as a share of one GPU in (0, 1]; None when absent or not such a share (a
    malformed value is ignored: the pod keeps to the resources it requests)."""
    if raw is None:
        return None
    try:
        share = float(raw)
    except ValueError:
        return None
    return share if 0 < share <= 1 else None
