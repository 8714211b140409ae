"""The catalogue: GPU models, the named MIG configs and the device-plugin (MPS) configs Slicewise ships.

Data comes from ``include/config/``: ``gpu_models.yaml`` (models, profiles, placements), ``mig_configs.yaml``
(the all-balanced formula and Slicewise's own compositions) and ``device_plugin_configs.yaml`` (MPS replica
counts). Every per-model layout is derived here, so the names mean the same thing everywhere in Slicewise.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from slicewise.catalog.layouts import Layout, is_maximal, layout, layout_problems
from slicewise.catalog.models import (
    MEDIA_SUFFIX,
    MPS_MAX_REPLICAS,
    CatalogError,
    GpuModel,
    load_models,
    profile_sort_key,
)

GPU_MODELS_FILE = "gpu_models.yaml"
MIG_CONFIGS_FILE = "mig_configs.yaml"
DEVICE_PLUGIN_CONFIGS_FILE = "device_plugin_configs.yaml"

ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
ALL_BALANCED = "all-balanced"
#: The device-plugin config without sharing; the label nvidia.com/device-plugin.config falls back to it.
DEFAULT_DEVICE_PLUGIN_CONFIG = "default"
MPS_CONFIG_PREFIX = "mps-"
SLICEWISE_PREFIX = "sw-"

# sw-4g-2gx2-1g: groups of "<g>g" with an optional "x<N>" repeat count.
_COMPOSITION = re.compile(r"^sw-(\d+g(?:x\d+)?(?:-\d+g(?:x\d+)?)*)$")
# GFD appends these to nvidia.com/gpu.product: -MIG-<profile> / -MIG-INVALID (single strategy), -SHARED.
_PRODUCT_SUFFIXES = re.compile(r"(-MIG-.*|-SHARED)$", re.IGNORECASE)


@dataclass(frozen=True)
class MigConfig:
    """A named mig-parted config: the layout it gives each model it applies to (None = MIG disabled).

    ``split`` (k, n): a per-GPU (heterogeneous) config for nodes of exactly n GPUs: GPUs 0..k-1 get the layout,
    the others MIG disabled (whole GPUs), as mig-parted's ``devices: [0, 1, ...]`` entries allow. None: every
    GPU of the node gets the layout."""

    name: str
    layouts: Mapping[str, Layout | None]
    description: str
    split: tuple[int, int] | None = None

    @property
    def is_default_name(self) -> bool:
        """Whether NVIDIA's generated/default config uses this name too (``all-*``), not Slicewise alone."""
        return not self.name.startswith(SLICEWISE_PREFIX)


@dataclass(frozen=True)
class DevicePluginConfig:
    """A named device-plugin config; ``mps_replicas`` 1 means no sharing (MIG devices, mixed strategy)."""

    name: str
    mps_replicas: int

    @property
    def mig_strategy(self) -> str:
        """The plugin's ``migStrategy``: ``mixed`` without sharing; ``none`` for MPS, which refuses mixed."""
        return "mixed" if self.mps_replicas == 1 else "none"


@dataclass(frozen=True)
class Catalog:
    """Models and named configs, with the look-ups the planner and the rollout need."""

    models: Mapping[str, GpuModel]
    mig_configs: Mapping[str, MigConfig]
    device_plugin_configs: Mapping[str, DevicePluginConfig]

    def model(self, name: str) -> GpuModel:
        """The model called ``name``; CatalogError naming the known models otherwise."""
        try:
            return self.models[name]
        except KeyError:
            raise CatalogError(f"unknown GPU model {name!r}; known: {', '.join(self.models)}") from None

    def model_for_product(self, product_label: str) -> GpuModel | None:
        """The model whose GFD ``nvidia.com/gpu.product`` is ``product_label``, or None.

        GFD suffixes (``-MIG-1g.10gb``, ``-MIG-INVALID``, ``-SHARED``) are ignored, as are case and a missing
        ``NVIDIA-`` prefix (older GFD versions wrote ``A100-SXM4-40GB``).
        """
        wanted = _product_key(product_label)
        for model in self.models.values():
            if any(_product_key(alias) == wanted for alias in model.product_aliases):
                return model
        return None

    def mig_config(self, name: str) -> MigConfig:
        """The named MIG config; CatalogError for names Slicewise does not ship."""
        try:
            return self.mig_configs[name]
        except KeyError:
            raise CatalogError(f"unknown MIG config {name!r}") from None

    def layout_of(self, config_name: str, model: str) -> Layout | None:
        """The layout ``config_name`` gives each GPU of ``model`` (None = MIG disabled).

        CatalogError if the name is unknown or the config has no entry for that model.
        """
        self.model(model)
        config = self.mig_config(config_name)
        if model not in config.layouts:
            applies = ", ".join(config.layouts) or "none"
            raise CatalogError(f"MIG config {config_name!r} has no entry for {model} (it covers: {applies})")
        return config.layouts[model]

    def configs_for(self, model: str) -> dict[str, Layout | None]:
        """Every config name that gives each GPU of ``model`` the same layout, in catalogue order, with it."""
        self.model(model)
        return {
            name: c.layouts[model]
            for name, c in self.mig_configs.items()
            if model in c.layouts and c.split is None
        }

    def splits_for(self, model: str, gpus: int) -> dict[str, tuple[Layout, tuple[int, int]]]:
        """The split configs for a node of ``gpus`` GPUs of ``model``: name -> (the layout of its MIG GPUs,
        its split)."""
        self.model(model)
        return {
            name: (lay, c.split)
            for name, c in self.mig_configs.items()
            if c.split is not None and c.split[1] == gpus and (lay := c.layouts.get(model)) is not None
        }

    def gpu_layouts(self, config_name: str, model: str, gpus: int) -> tuple[Layout | None, ...]:
        """The layout of each GPU (by device index) of a ``gpus``-GPU node of ``model`` under ``config_name``.

        CatalogError as ``layout_of``, and for a split config on a node of another size."""
        lay = self.layout_of(config_name, model)
        split = self.mig_configs[config_name].split
        if split is None:
            return (lay,) * gpus
        mig_gpus, node_gpus = split
        if gpus != node_gpus:
            raise CatalogError(f"MIG config {config_name!r} is for nodes of {node_gpus} GPUs, not {gpus}")
        return (lay,) * mig_gpus + (None,) * (gpus - mig_gpus)

    def config_named_for(
        self, model: str, layout_: Layout | None, split: tuple[int, int] | None = None
    ) -> str | None:
        """A config name that gives ``model`` exactly ``layout_`` (NVIDIA's names first) on every GPU, or with
        ``split`` (k, n) on the first k of n GPUs; None if the catalogue has none."""
        wanted = None if layout_ is None else layout(layout_)
        for name, config in self.mig_configs.items():  # default names come first in catalogue order
            if config.split == split and model in config.layouts and config.layouts[model] == wanted:
                return name
        return None

    def mps_replicas(self, device_plugin_config: str) -> int:
        """MPS clients per GPU under that device-plugin config: 1 for ``""``/``default`` (no sharing)."""
        if device_plugin_config == "":  # label absent: the plugin falls back to the default config
            device_plugin_config = DEFAULT_DEVICE_PLUGIN_CONFIG
        try:
            return self.device_plugin_configs[device_plugin_config].mps_replicas
        except KeyError:
            known = ", ".join(self.device_plugin_configs)
            raise CatalogError(
                f"unknown device-plugin config {device_plugin_config!r}; known: {known}"
            ) from None

    def mps_replica_counts(self) -> list[int]:
        """The MPS replica counts the device-plugin configs offer, ascending (1: no sharing)."""
        return sorted({c.mps_replicas for c in self.device_plugin_configs.values()})

    def device_plugin_config_for(self, replicas: int) -> str:
        """The device-plugin config with ``replicas`` MPS clients per GPU (``default`` for 1)."""
        for config in self.device_plugin_configs.values():
            if config.mps_replicas == replicas:
                return config.name
        raise CatalogError(
            f"no device-plugin config with {replicas} MPS replicas; offered: {self.mps_replica_counts()}"
        )


def load_catalog(config_dir: Path | None = None) -> Catalog:
    """The catalogue of ``config_dir`` (default ``include/config``, read once and cached); CatalogError on bad data."""
    if config_dir is None:
        return _default_catalog()
    return _build(config_dir)


@functools.cache
def _default_catalog() -> Catalog:
    from slicewise.settings import CONFIG_DIR

    return _build(CONFIG_DIR)


def _build(config_dir: Path) -> Catalog:
    models = load_models(config_dir / GPU_MODELS_FILE)
    mig_raw = _read_mapping(config_dir / MIG_CONFIGS_FILE)
    plugin_raw = _read_mapping(config_dir / DEVICE_PLUGIN_CONFIGS_FILE)
    defaults = _default_configs(models, mig_raw.get("balanced") or {})
    own = _slicewise_configs(models, mig_raw.get("compositions") or {}, defaults)
    splits = _split_configs(models, {**defaults, **own}, mig_raw.get("splits") or [])
    return Catalog(
        models=MappingProxyType(dict(models)),
        mig_configs=MappingProxyType({**defaults, **own, **splits}),
        device_plugin_configs=MappingProxyType(_device_plugin_configs(plugin_raw.get("mps_replicas") or [])),
    )


def _read_mapping(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a mapping")
    return data


def _checked(model: GpuModel, config: str, layout_: Layout) -> Layout:
    problems = layout_problems(model, layout_)
    if problems:
        raise CatalogError(f"MIG config {config!r} is invalid on {model.name}: {'; '.join(problems)}")
    return layout_


def _default_configs(models: Mapping[str, GpuModel], balanced: Mapping[Any, Any]) -> dict[str, MigConfig]:
    """NVIDIA's names, derived per model as mig-parted's config builder does (pkg/mig/builder/balanced.go)."""
    configs = {
        ALL_DISABLED: MigConfig(ALL_DISABLED, {m: None for m in models}, "MIG disabled: whole GPUs"),
        ALL_ENABLED: MigConfig(
            ALL_ENABLED, {m.name: () for m in models.values() if m.mig}, "MIG enabled, no instances"
        ),
    }
    formulas = {int(slices): [int(g) for g in gs] for slices, gs in balanced.items()}
    balanced_layouts: dict[str, Layout | None] = {}
    for model in models.values():
        if model.compute_slices in formulas:
            composition = _composition_layout(model, Counter(formulas[model.compute_slices]))
            if composition is None:
                raise CatalogError(f"{ALL_BALANCED}: {model.name} lacks a base profile of the formula")
            balanced_layouts[model.name] = _checked(model, ALL_BALANCED, composition)
    configs[ALL_BALANCED] = MigConfig(
        ALL_BALANCED, balanced_layouts, "NVIDIA's mix 1x3g + 1x2g + 2x1g (4-slice GPUs: 1x2g + 2x1g)"
    )
    per_profile: dict[str, dict[str, Layout | None]] = {}
    for model in models.values():
        for profile in model.profiles.values():
            name = "all-" + profile.name.replace("+", ".")
            count = 1 if profile.media else profile.max
            per_profile.setdefault(name, {})[model.name] = _checked(model, name, ((profile.name, count),))
    for name in sorted(
        per_profile, key=lambda n: profile_sort_key(n.removeprefix("all-").replace(".me", "+me"))
    ):
        profile_name = name.removeprefix("all-").replace(".me", MEDIA_SUFFIX)
        configs[name] = MigConfig(name, per_profile[name], f"as many {profile_name} as fit")
    return configs


def _composition_layout(model: GpuModel, composition: Counter[int]) -> Layout | None:
    """The layout of base profiles with those g-values on ``model``; None if a base profile is missing."""
    counts: dict[str, int] = {}
    for g, n in composition.items():
        profile = model.base_profile(g)
        if profile is None:
            return None
        counts[profile.name] = n
    return layout(counts)


def parse_composition(name: str) -> Counter[int]:
    """g-value -> instance count of a Slicewise name such as ``sw-3g-2gx2``; CatalogError unless canonical."""
    match = _COMPOSITION.match(name)
    if not match:
        raise CatalogError(f"{name!r} is not a composition name like sw-4g-3g or sw-3g-2gx2")
    groups = [re.fullmatch(r"(\d+)g(?:x(\d+))?", part) for part in match[1].split("-")]
    pairs = [(int(m[1]), int(m[2] or 1)) for m in groups if m]
    composition = Counter(dict(pairs))
    if len(composition) != len(pairs) or composition_name(composition) != name or 0 in composition:
        raise CatalogError(f"{name!r} is not canonical: g-values descending, each once, 'xN' only for N >= 2")
    return composition


def composition_name(composition: Mapping[int, int]) -> str:
    """The Slicewise name of a composition (g-value -> count): ``{3: 1, 2: 2}`` -> ``sw-3g-2gx2``."""
    parts = [f"{g}g" + (f"x{n}" if n > 1 else "") for g, n in sorted(composition.items(), reverse=True) if n]
    return SLICEWISE_PREFIX + "-".join(parts)


def _slicewise_configs(
    models: Mapping[str, GpuModel], compositions: Mapping[str, Any], defaults: Mapping[str, MigConfig]
) -> dict[str, MigConfig]:
    configs: dict[str, MigConfig] = {}
    for name, note in compositions.items():
        composition = parse_composition(str(name))
        layouts: dict[str, Layout | None] = {}
        for model in models.values():
            candidate = _composition_layout(model, composition)
            if candidate is not None and not layout_problems(model, candidate):
                layouts[model.name] = candidate
        if not layouts:
            raise CatalogError(f"MIG config {name!r} is valid on no model")
        # Redundant when, on every model it covers, a default name (e.g. all-3g.40gb) already gives its layout.
        twins = {
            m: next((d.name for d in defaults.values() if m in d.layouts and d.layouts[m] == lay), None)
            for m, lay in layouts.items()
        }
        if all(twins.values()):
            same = ", ".join(f"{twin} on {m}" for m, twin in twins.items())
            raise CatalogError(f"MIG config {name!r} only repeats default names ({same}); drop it")
        mix = " + ".join(f"{n}x{g}g" for g, n in sorted(composition.items(), reverse=True))
        description = f"Slicewise mix {mix}" + (f": {note}" if note else "")
        configs[str(name)] = MigConfig(str(name), layouts, description)
    return configs


def split_name(mig_gpus: int, node_gpus: int, composition: Mapping[int, int]) -> str:
    """``sw-4of8-3g-2g-1gx2``: the composition on GPUs 0-3 of an 8-GPU node, the other four whole."""
    return f"{SLICEWISE_PREFIX}{mig_gpus}of{node_gpus}-" + composition_name(composition).removeprefix(
        SLICEWISE_PREFIX
    )


def _split_configs(
    models: Mapping[str, GpuModel], homogeneous: Mapping[str, MigConfig], splits: list[Any]
) -> dict[str, MigConfig]:
    """Every base-profile composition of the homogeneous configs (MIG on, more than one instance) on the first
    k GPUs of an n-GPU node, for each [k, n] in ``splits``; on each model where it is maximal (as for sw-*)."""
    compositions: dict[str, Counter[int]] = {}
    for config in homogeneous.values():
        for model_name, lay in config.layouts.items():
            model = models[model_name]
            if not lay or sum(n for _, n in lay) < 2:
                continue
            if any(model.base_profile(model.profile(p).g) != model.profile(p) for p, _ in lay):
                continue
            composition = Counter({model.profile(p).g: n for p, n in lay})
            compositions.setdefault(composition_name(composition), composition)
    configs: dict[str, MigConfig] = {}
    for raw in splits:
        mig_gpus, node_gpus = (int(x) for x in raw)
        if not 0 < mig_gpus < node_gpus:
            raise CatalogError(f"split {raw}: needs 0 < MIG GPUs < node GPUs")
        for composition in compositions.values():
            layouts: dict[str, Layout | None] = {}
            for model in models.values():
                lay = _composition_layout(model, composition)
                if lay is not None and not layout_problems(model, lay) and is_maximal(model, lay):
                    layouts[model.name] = lay
            if not layouts:
                continue
            name = split_name(mig_gpus, node_gpus, composition)
            mix = " + ".join(f"{n}x{g}g" for g, n in sorted(composition.items(), reverse=True))
            description = f"GPUs 0-{mig_gpus - 1} of {node_gpus}: {mix}; the rest whole"
            configs[name] = MigConfig(name, layouts, description, (mig_gpus, node_gpus))
    return configs


def _device_plugin_configs(replicas: list[Any]) -> dict[str, DevicePluginConfig]:
    configs = {DEFAULT_DEVICE_PLUGIN_CONFIG: DevicePluginConfig(DEFAULT_DEVICE_PLUGIN_CONFIG, 1)}
    for raw in replicas:
        n = int(raw)
        if not 2 <= n <= MPS_MAX_REPLICAS:
            raise CatalogError(f"MPS replicas {n}: the device plugin allows 2..{MPS_MAX_REPLICAS} per GPU")
        name = f"{MPS_CONFIG_PREFIX}{n}"
        if name in configs:
            raise CatalogError(f"MPS replicas {n} listed twice")
        configs[name] = DevicePluginConfig(name, n)
    return configs


# The planner asks once per node and run; a fleet has a handful of products.
@functools.lru_cache(maxsize=4096)
def _product_key(product: str) -> str:
    return product_without_suffixes(product).upper().removeprefix("NVIDIA-")


def product_without_suffixes(product: str) -> str:
    """A GFD ``nvidia.com/gpu.product`` without the suffix it appends for MIG (``-MIG-<profile>``,
    ``-MIG-INVALID``) or sharing (``-SHARED``): the GPU model, whatever the node's mode."""
    return _PRODUCT_SUFFIXES.sub("", product.strip())
