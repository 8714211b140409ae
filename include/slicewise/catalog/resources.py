"""Kubernetes extended resources a layout advertises (mixed MIG strategy) and the GPU share each unit is."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from slicewise.catalog.layouts import Layout, layout_problems
from slicewise.catalog.models import CatalogError, GpuModel

GPU_RESOURCE = "nvidia.com/gpu"
#: Not a Kubernetes resource: the demand vocabulary's name for a pod asking for k > 1 whole GPUs on one node.
WHOLE_GPUS = "slicewise.io/whole-gpus"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def resource_for_profile(profile: str) -> str:
    """The device plugin's resource for a MIG profile with the mixed strategy: ``nvidia.com/mig-1g.10gb``.

    ``+`` becomes ``.`` (``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``), as k8s-device-plugin names it.
    """
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def ksm_resource(resource: str) -> str:
    """kube-state-metrics' spelling of an extended resource: every ``[^a-zA-Z0-9_]`` becomes ``_``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


def layout_capacity(
    model: GpuModel, layout_: Layout | None, gpus: int, mps_replicas: int = 1
) -> dict[str, int]:
    """Allocatable extended resources of a node with ``gpus`` GPUs of ``model``, all in ``layout_``.

    MIG disabled (None): ``{"nvidia.com/gpu": gpus * mps_replicas}``. MIG enabled: one
    ``nvidia.com/mig-<profile>`` per profile, ``count * gpus`` (mixed strategy); ``()`` advertises nothing.
    CatalogError for an invalid layout, MPS on MIG (the device plugin refuses it) or replicas beyond the model's.
    """
    if gpus < 0:
        raise CatalogError(f"gpus must be >= 0, got {gpus}")
    if not 1 <= mps_replicas <= model.mps_max_replicas:
        raise CatalogError(f"MPS replicas {mps_replicas}: a {model.name} allows 1..{model.mps_max_replicas}")
    if layout_ is None:
        return {GPU_RESOURCE: gpus * mps_replicas}
    if mps_replicas != 1:
        raise CatalogError("MPS sharing is not supported on MIG-enabled GPUs (k8s-device-plugin)")
    problems = layout_problems(model, layout_)
    if problems:
        raise CatalogError(f"invalid {model.name} layout {list(layout_)}: {'; '.join(problems)}")
    return {resource_for_profile(profile): count * gpus for profile, count in layout_}


def gpus_capacity(model: GpuModel, layouts: Sequence[Layout | None], mps_replicas: int = 1) -> dict[str, int]:
    """Allocatable extended resources of a node whose GPUs have ``layouts``, one per GPU (a split config gives
    some GPUs MIG and leaves the others whole: the mixed strategy advertises both). CatalogError as
    ``layout_capacity``."""
    total: Counter[str] = Counter()
    for lay in layouts:
        total.update(layout_capacity(model, lay, 1, mps_replicas))
    return dict(total)


def compute_share(model: GpuModel, resource: str, mps_replicas: int = 1) -> float:
    """The share of one GPU's compute that one unit of ``resource`` is on ``model``.

    ``nvidia.com/mig-<profile>``: g / compute slices; ``nvidia.com/gpu``: 1 / ``mps_replicas``. The
    kube-state-metrics spelling (``nvidia_com_mig_1g_10gb``) is accepted too. CatalogError for a resource the
    model does not have, or MPS replicas with a MIG resource.
    """
    if not 1 <= mps_replicas <= model.mps_max_replicas:
        raise CatalogError(f"MPS replicas {mps_replicas}: a {model.name} allows 1..{model.mps_max_replicas}")
    if resource in (GPU_RESOURCE, ksm_resource(GPU_RESOURCE)):
        return 1.0 / mps_replicas
    for profile in model.profiles.values():
        name = resource_for_profile(profile.name)
        if resource in (name, ksm_resource(name)):
            if mps_replicas != 1:
                raise CatalogError("MPS sharing is not supported on MIG-enabled GPUs (k8s-device-plugin)")
            return profile.g / model.compute_slices
    raise CatalogError(f"{model.name} advertises no resource {resource!r}")
