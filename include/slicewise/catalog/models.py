"""GPU models and their MIG GPU-instance profiles, read from ``include/config/gpu_models.yaml``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from slicewise.errors import PermanentError

#: A MIG GPU-instance profile name as mig-parted accepts it for these GPUs: ``1g.10gb`` or ``1g.10gb+me``.
PROFILE_PATTERN = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")
MEDIA_SUFFIX = "+me"

#: k8s-device-plugin (api/config/v1/sharing.go): MPS allows 48 clients per GPU from compute capability 7.5 on,
#: 16 below.
MPS_MAX_REPLICAS = 48
MPS_MAX_REPLICAS_PRE_VOLTA = 16
_MPS_FULL_CAPABILITY = (7, 5)


class CatalogError(PermanentError, ValueError):
    """The catalogue data is inconsistent, or a name (model, config, profile, resource) is unknown."""


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile of a model; ``placements`` are its start slots on the memory axis."""

    name: str
    g: int
    mem_slices: int
    memory_mib: int
    max: int
    placements: tuple[int, ...]

    @property
    def media(self) -> bool:
        """Whether this is a media-extension (``+me``) profile; a GPU holds at most one such instance."""
        return self.name.endswith(MEDIA_SUFFIX)


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: identities on the node (GFD product, PCI IDs, DCGM name) and its MIG geometry."""

    name: str
    dcgm_model_name: str
    gpu_product: str
    product_aliases: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    memory_mib: int
    tdp_w: float
    compute_slices: int
    memory_slices: int
    compute_capability: str
    profiles: Mapping[str, MigProfile]

    @property
    def mig(self) -> bool:
        """Whether the model has MIG; one without (T4, V100, ...) shares only by MPS / time-slicing."""
        return bool(self.profiles)

    def base_profile(self, g: int) -> MigProfile | None:
        """The profile with ``g`` compute slices and the fewest memory slices, never ``+me``; None if absent."""
        candidates = [p for p in self.profiles.values() if p.g == g and not p.media]
        return min(candidates, key=lambda p: (p.mem_slices, p.name), default=None)

    def profile(self, name: str) -> MigProfile:
        """The profile called ``name``; CatalogError naming the known ones otherwise."""
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(self.profiles)
            raise CatalogError(f"{self.name} has no MIG profile {name!r}; known: {known}") from None

    @property
    def mps_max_replicas(self) -> int:
        """The most MPS clients the device plugin allows per GPU of this model."""
        major, _, minor = self.compute_capability.partition(".")
        capability = (int(major), int(minor or 0))
        return MPS_MAX_REPLICAS if capability >= _MPS_FULL_CAPABILITY else MPS_MAX_REPLICAS_PRE_VOLTA


def profile_sort_key(profile: str) -> tuple[int, int, int, str]:
    """Orders profile names as NVIDIA lists them: by compute slices, then memory, base before ``+me``."""
    match = PROFILE_PATTERN.match(profile)
    if not match:
        return (1 << 30, 0, 0, profile)
    return (int(match[1]), int(match[2]), 1 if match[3] else 0, profile)


def load_models(path: Path) -> dict[str, GpuModel]:
    """Every model of a ``gpu_models.yaml``-shaped file; CatalogError on missing or inconsistent fields."""
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), dict):
        raise CatalogError(f"{path}: expected a mapping with a 'models' mapping")
    models: dict[str, GpuModel] = {}
    for name, spec in raw["models"].items():
        try:
            models[str(name)] = _parse_model(str(name), spec)
        except CatalogError as exc:
            raise CatalogError(f"{path}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogError(f"{path}: model {name}: bad or missing field: {exc!r}") from None
    return models


def _parse_model(name: str, spec: Mapping[str, Any]) -> GpuModel:
    gpu_product = str(spec["gpu_product"])
    aliases = [str(a) for a in spec.get("product_aliases", [])]
    # product_aliases is the complete list of GFD products, the canonical one first.
    aliases = [gpu_product, *(a for a in aliases if a != gpu_product)]
    mig = spec.get("mig", True)
    if not isinstance(mig, bool):
        raise CatalogError(f"model {name}: mig must be true or false, got {mig!r}")
    if not mig and any(k in spec for k in ("profiles", "compute_slices", "memory_slices", "pci_device_ids")):
        raise CatalogError(f"model {name}: a model with mig: false has no MIG geometry, profiles or PCI IDs")
    model = GpuModel(
        name=name,
        dcgm_model_name=str(spec["dcgm_model_name"]),
        gpu_product=gpu_product,
        product_aliases=tuple(aliases),
        pci_device_ids=tuple(str(i) for i in spec["pci_device_ids"]) if mig else (),
        memory_mib=int(spec["memory_mib"]),
        tdp_w=float(spec["tdp_w"]),
        compute_slices=int(spec["compute_slices"]) if mig else 0,
        memory_slices=int(spec["memory_slices"]) if mig else 0,
        compute_capability=str(spec["compute_capability"]),
        profiles=MappingProxyType(
            {str(p): _parse_profile(str(p), v) for p, v in spec["profiles"].items()} if mig else {}
        ),
    )
    _check_model(model)
    return model


def _parse_profile(name: str, spec: Mapping[str, Any]) -> MigProfile:
    return MigProfile(
        name=name,
        g=int(spec["g"]),
        mem_slices=int(spec["mem_slices"]),
        memory_mib=int(spec["memory_mib"]),
        max=int(spec["max"]),
        placements=tuple(sorted(int(s) for s in spec["placements"])),
    )


def _check_model(model: GpuModel) -> None:
    where = f"model {model.name}"
    if not re.fullmatch(r"\d+\.\d+", model.compute_capability):
        raise CatalogError(
            f"{where}: compute_capability must look like '8.0', got {model.compute_capability!r}"
        )
    if not model.mig:
        return
    if not model.pci_device_ids or not all(
        re.fullmatch(r"0x[0-9A-F]{4}10DE", i) for i in model.pci_device_ids
    ):
        raise CatalogError(f"{where}: pci_device_ids must be non-empty 0x<device>10DE IDs")
    for profile in model.profiles.values():
        match = PROFILE_PATTERN.match(profile.name)
        if not match:
            raise CatalogError(f"{where}: profile name {profile.name!r} is not <g>g.<mem>gb[+me]")
        if int(match[1]) != profile.g:
            raise CatalogError(f"{where}: profile {profile.name} has g={profile.g}, not what its name says")
        if not 0 < profile.g <= model.compute_slices or profile.max < 1:
            raise CatalogError(f"{where}: profile {profile.name} has impossible g or max")
        if not profile.placements or any(
            s < 0 or s + profile.mem_slices > model.memory_slices for s in profile.placements
        ):
            raise CatalogError(
                f"{where}: profile {profile.name} placements {list(profile.placements)} must be non-empty "
                f"and fit {model.memory_slices} memory slots"
            )
