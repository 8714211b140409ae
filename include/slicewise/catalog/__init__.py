"""The MIG/MPS catalogue: GPU models, valid MIG layouts, the named configs Slicewise ships, resource maths.

Pure functions over data in ``include/config/`` (gpu_models.yaml, mig_configs.yaml, device_plugin_configs.yaml);
the only I/O is reading those files. ``slicewise catalog render`` writes the Kubernetes files derived from it.
"""

from slicewise.catalog.configs import (
    Catalog,
    DevicePluginConfig,
    MigConfig,
    composition_name,
    load_catalog,
    parse_composition,
)
from slicewise.catalog.layouts import (
    Layout,
    describe_layout,
    is_maximal,
    is_valid_layout,
    layout,
    layout_problems,
    place,
    valid_layouts,
)
from slicewise.catalog.models import CatalogError, GpuModel, MigProfile
from slicewise.catalog.render import render_device_plugin_config, render_mig_parted_config
from slicewise.catalog.resources import (
    compute_share,
    gpus_capacity,
    ksm_resource,
    layout_capacity,
    resource_for_profile,
)

__all__ = [
    "Catalog",
    "CatalogError",
    "DevicePluginConfig",
    "GpuModel",
    "Layout",
    "MigConfig",
    "MigProfile",
    "composition_name",
    "compute_share",
    "describe_layout",
    "gpus_capacity",
    "is_maximal",
    "is_valid_layout",
    "ksm_resource",
    "layout",
    "layout_capacity",
    "layout_problems",
    "load_catalog",
    "parse_composition",
    "place",
    "render_device_plugin_config",
    "render_mig_parted_config",
    "resource_for_profile",
    "valid_layouts",
]
