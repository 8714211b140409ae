"""The Kubernetes files generated from the catalogue: the mig-parted config and the device-plugin configs.

``slicewise catalog render`` writes them to ``include/k8s/``; ``--check`` (and tests/unit/test_k8s_configs.py)
fail when the shipped files differ from what the catalogue generates.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from slicewise.catalog.configs import ALL_DISABLED, ALL_ENABLED, Catalog, DevicePluginConfig
from slicewise.catalog.layouts import Layout, describe_layout
from slicewise.catalog.models import CatalogError
from slicewise.catalog.resources import GPU_RESOURCE, resource_for_profile

K8S_DIR = Path(__file__).resolve().parents[2] / "k8s"
MIG_PARTED_FILE = "mig-parted-config.yaml"
DEVICE_PLUGIN_FILE = "device-plugin-config.yaml"
SCHEDULER_FILE = "scheduler-binpack.yaml"
SCHEDULER_CONFIG_MAP = "slicewise-scheduler-config"
SCHEDULER_NAMESPACE = "kube-system"
BINPACK_SCHEDULER = "slicewise-binpack"
#: Score weights (1-100): GPUs decide where a GPU pod goes; CPU and memory only break ties between GPU nodes.
GPU_WEIGHT, HOST_WEIGHT = 5, 1
NAMESPACE = "gpu-operator"
MIG_PARTED_CONFIG_MAP = "slicewise-mig-parted-config"
DEVICE_PLUGIN_CONFIG_MAP = "slicewise-device-plugin-config"
# NVIDIA's own files give these two one entry without a device filter: they mean the same on every GPU.
_UNFILTERED = (ALL_DISABLED, ALL_ENABLED)


def render_mig_parted_config(catalog: Catalog) -> dict[str, Any]:
    """The mig-parted config (format v1) of every named MIG config: ``{"version": "v1", "mig-configs": ...}``.

    Each config gets one entry per group of models with the same layout, selected by the models' PCI IDs
    (``device-filter``); a split config two per group (``devices``: the MIG GPUs' indices, then the whole ones');
    all-disabled and all-enabled get a single unfiltered entry. CatalogError if two
    models that share a PCI ID would get different entries, since mig-parted could not tell them apart.
    """
    configs: dict[str, list[dict[str, Any]]] = {}
    for name, config in catalog.mig_configs.items():
        if name in _UNFILTERED:
            layouts = set(config.layouts.values())
            mig_models = {m.name for m in catalog.models.values() if m.mig}
            if len(layouts) != 1 or not mig_models <= set(config.layouts):
                raise CatalogError(f"MIG config {name!r} must give every MIG model the same layout")
            configs[name] = [_entry(None, next(iter(layouts)))]
            continue
        groups: dict[Layout | None, list[str]] = {}
        for model, lay in config.layouts.items():
            groups.setdefault(lay, []).append(model)
        _check_filters_unambiguous(catalog, name, groups)
        entries = []
        for lay, models in groups.items():
            ids = _pci_ids(catalog, models)
            if config.split is None:
                entries.append(_entry(list(ids), lay))
                continue
            # Per device, as in mig-parted's examples: MIG on the first k GPUs, disabled on the others.
            mig_gpus, node_gpus = config.split
            entries.append(_entry(list(ids), lay, list(range(mig_gpus))))
            entries.append(_entry(list(ids), None, list(range(mig_gpus, node_gpus))))
        configs[name] = entries
    return {"version": "v1", "mig-configs": configs}


def _entry(
    device_filter: list[str] | None, lay: Layout | None, devices: list[int] | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {} if device_filter is None else {"device-filter": device_filter}
    entry["devices"] = "all" if devices is None else devices
    entry["mig-enabled"] = lay is not None
    if lay is not None:
        entry["mig-devices"] = dict(lay)
    return entry


def _pci_ids(catalog: Catalog, models: list[str]) -> list[str]:
    ids: dict[str, None] = {}  # ordered set: models sharing a filter list contribute it once
    for model in models:
        ids.update(dict.fromkeys(catalog.models[model].pci_device_ids))
    return list(ids)


def _check_filters_unambiguous(
    catalog: Catalog, config: str, groups: Mapping[Layout | None, list[str]]
) -> None:
    owners: dict[str, set[str]] = {}
    for gpu in catalog.models.values():
        for pci_id in gpu.pci_device_ids:
            owners.setdefault(pci_id, set()).add(gpu.name)
    for lay, models in groups.items():
        for model in models:
            for pci_id in catalog.models[model].pci_device_ids:
                if not owners[pci_id] <= set(models):
                    raise CatalogError(
                        f"MIG config {config!r}: PCI ID {pci_id} is shared by {sorted(owners[pci_id])}, "
                        f"which do not all get the layout {describe_layout(lay)} "
                        "- split their pci_device_ids in gpu_models.yaml"
                    )


def device_plugin_config_document(config: DevicePluginConfig) -> dict[str, Any]:
    """The k8s-device-plugin config file (v1) of one named config.

    No sharing: ``migStrategy: mixed``. MPS: ``migStrategy: none`` (the plugin refuses MPS with the mixed
    strategy) and ``sharing.mps`` with N replicas of ``nvidia.com/gpu``.
    """
    document: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": config.mig_strategy}}
    if config.mps_replicas > 1:
        document["sharing"] = {
            "mps": {"resources": [{"name": GPU_RESOURCE, "replicas": config.mps_replicas}]}
        }
    return document


def render_device_plugin_config(catalog: Catalog) -> dict[str, Any]:
    """The ConfigMap of every device-plugin config: one data key per config name, each a config YAML string."""
    data = {
        name: to_yaml(device_plugin_config_document(config))
        for name, config in catalog.device_plugin_configs.items()
    }
    return _config_map(DEVICE_PLUGIN_CONFIG_MAP, data)


def mig_parted_config_map(catalog: Catalog) -> dict[str, Any]:
    """The ConfigMap holding the mig-parted config under the key ``config.yaml`` (what the MIG manager reads)."""
    return _config_map(MIG_PARTED_CONFIG_MAP, {"config.yaml": to_yaml(render_mig_parted_config(catalog))})


def scheduler_config(catalog: Catalog) -> dict[str, Any]:
    """A ``KubeSchedulerConfiguration`` with one profile, ``slicewise-binpack``: ``NodeResourcesFit`` scoring with
    ``MostAllocated`` over ``nvidia.com/gpu`` and every MIG resource of the catalogue (a scheduler scores only the
    resources it is told to), so GPU pods fill nodes that are already in use and leave whole nodes free."""
    mig = sorted({resource_for_profile(p) for m in catalog.models.values() for p in m.profiles})
    resources = [{"name": "cpu", "weight": HOST_WEIGHT}, {"name": "memory", "weight": HOST_WEIGHT}]
    resources += [{"name": name, "weight": GPU_WEIGHT} for name in (GPU_RESOURCE, *mig)]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": BINPACK_SCHEDULER,
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {"scoringStrategy": {"type": "MostAllocated", "resources": resources}},
                    }
                ],
            }
        ],
    }


def scheduler_config_map(catalog: Catalog) -> dict[str, Any]:
    """The ConfigMap holding the scheduler configuration under ``scheduler-config.yaml``."""
    return _config_map(
        SCHEDULER_CONFIG_MAP,
        {"scheduler-config.yaml": to_yaml(scheduler_config(catalog))},
        SCHEDULER_NAMESPACE,
    )


def _config_map(name: str, data: dict[str, str], namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "slicewise"},
        },
        "data": data,
    }


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings as ``|`` blocks, so embedded config files stay readable in the manifest."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
    # Lists of plain values (device-filter IDs) on one line, as NVIDIA writes them; lists of mappings as blocks.
    flow = bool(value) and all(isinstance(v, str | int) for v in value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_BlockDumper.add_representer(str, _str)
_BlockDumper.add_representer(list, _list)


def to_yaml(data: Any) -> str:
    """Block-style YAML, keys in insertion order (the catalogue's), ``|`` multi-line strings, unwrapped lists."""
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False, width=200)


def rendered_files(catalog: Catalog) -> dict[str, str]:
    """File name (in ``include/k8s``) -> the exact text ``slicewise catalog render`` writes there."""
    return {
        MIG_PARTED_FILE: _mig_parted_header(catalog) + to_yaml(mig_parted_config_map(catalog)),
        DEVICE_PLUGIN_FILE: _device_plugin_header(catalog) + to_yaml(render_device_plugin_config(catalog)),
        SCHEDULER_FILE: _scheduler_header() + to_yaml(scheduler_config_map(catalog)),
    }


def write_rendered(catalog: Catalog, k8s_dir: Path = K8S_DIR) -> list[Path]:
    """Write the generated files into ``k8s_dir``; returns the paths written."""
    written = []
    for name, text in rendered_files(catalog).items():
        path = k8s_dir / name
        path.write_text(text)
        written.append(path)
    return written


def stale_files(catalog: Catalog, k8s_dir: Path = K8S_DIR) -> list[Path]:
    """The generated files in ``k8s_dir`` that are missing or differ from what the catalogue generates."""
    stale = []
    for name, text in rendered_files(catalog).items():
        path = k8s_dir / name
        if not path.is_file() or path.read_text() != text:
            stale.append(path)
    return stale


_GENERATED = """\
# GENERATED by `slicewise catalog render` from include/config/{sources} - do not edit by hand.
# After changing the catalogue, re-run it; `slicewise catalog render --check` (CI) fails on a stale file.
"""


def _mig_parted_header(catalog: Catalog) -> str:
    width = max(len(n) for n in catalog.mig_configs)
    index = []
    mig_models = {m.name for m in catalog.models.values() if m.mig}
    for name, config in catalog.mig_configs.items():
        # Name the models only where a config does not cover every MIG model.
        where = "" if mig_models <= set(config.layouts) else f" [{', '.join(config.layouts)}]"
        index.append(f"#   {name:<{width}}  {config.description}{where}")
    return (
        _GENERATED.format(sources="gpu_models.yaml and mig_configs.yaml")
        + f"""#
# Named MIG layouts for the GPU Operator's MIG manager (mig-parted config format v1). To use them:
#   kubectl apply -f include/k8s/{MIG_PARTED_FILE}
#   kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge \\
#     -p '{{"spec": {{"migManager": {{"config": {{"name": "{MIG_PARTED_CONFIG_MAP}"}}}}}}}}'
# (that is ClusterPolicy spec.migManager.config.name; the ConfigMap must be in the operator's namespace), then
# select a layout per node with the label nvidia.com/mig.config=<name>. Layouts with more than one profile
# (all-balanced, sw-*) need the mixed strategy, which Slicewise's resource names assume throughout:
#   kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge \
#     -p '{{"spec": {{"mig": {{"strategy": "mixed"}}}}}}'
# Entries select GPUs by PCI device ID (device-filter); a GPU no entry matches is left as it is. The split
# configs sw-<k>of<n>-* are for nodes of exactly n GPUs: MIG on devices 0..k-1, disabled on the rest (the
# device plugin's mixed strategy then advertises nvidia.com/gpu and nvidia.com/mig-* on one node).
#
# Configs, [models] where not all (layouts differ per model: all-1g.10gb is 4 x 1g.10gb on an A100-40GB,
# 7 on 80 GB cards; every name's layouts are in the entries below):
"""
        + "\n".join(index)
        + "\n"
    )


def _device_plugin_header(catalog: Catalog) -> str:
    names = ", ".join(catalog.device_plugin_configs)
    return (
        _GENERATED.format(sources="device_plugin_configs.yaml")
        + f"""#
# NVIDIA device-plugin configs: {names}.
#   default  no sharing; MIG instances advertised as nvidia.com/mig-<profile> (mixed strategy)
#   mps-N    MPS: each whole GPU advertised as N nvidia.com/gpu, each client limited to 1/N of its memory
#            and compute by the MPS daemon
# To use them:
#   kubectl apply -f include/k8s/{DEVICE_PLUGIN_FILE}
#   kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge \\
#     -p '{{"spec": {{"devicePlugin": {{"config": {{"name": "{DEVICE_PLUGIN_CONFIG_MAP}", "default": "default"}}}}}}}}'
# (ClusterPolicy spec.devicePlugin.config.name / .default), then select a config per node with the label
# nvidia.com/device-plugin.config=<key>; a node without the label uses `default`. The operator does not watch
# this ConfigMap: after editing it, restart the nvidia-device-plugin-daemonset.
# One sharing mode applies to all GPUs of a node, and MPS works only on full GPUs: use mps-N only on nodes
# whose GPUs have MIG disabled (nvidia.com/mig.config=all-disabled). The plugin refuses MPS with the mixed
# MIG strategy, so mps-N sets migStrategy none. The plugin ranks command-line flags and environment above the
# config file: if your operator version passes spec.mig.strategy to it as MIG_STRATEGY, check that MPS nodes
# still come up with strategy none (label nvidia.com/gpu.sharing-strategy=mps, nvidia.com/gpu.replicas=N).
"""
    )


def _scheduler_header() -> str:
    return (
        _GENERATED.format(sources="gpu_models.yaml")
        + f"""#
# A kube-scheduler profile that bin-packs GPU pods: NodeResourcesFit scores nodes MostAllocated over nvidia.com/gpu
# and every nvidia.com/mig-* resource (weight {GPU_WEIGHT}; CPU and memory {HOST_WEIGHT}), so a GPU pod goes to the
# node whose GPUs are already the most allocated and whole nodes stay free for pods that need them (and for the
# cluster autoscaler to remove). The default profile scores CPU and memory only, LeastAllocated: it spreads GPU
# pods and scatters whole GPUs. Slicewise's what-if backtest models this profile as --scheduler binpack.
# To use it, run it as a second scheduler and opt pods in (Kubernetes "Configure Multiple Schedulers"):
#   kubectl apply -f include/k8s/{SCHEDULER_FILE}
#   a kube-scheduler Deployment in {SCHEDULER_NAMESPACE} started with --config=/etc/slicewise/scheduler-config.yaml
#   (this ConfigMap mounted there, the image of your cluster's version, ClusterRole system:kube-scheduler)
#   pods: spec.schedulerName: {BINPACK_SCHEDULER}
# or copy the profile's pluginConfig into your control plane's scheduler configuration where you own it (on EKS:
# the cluster's kubeSchedulerConfig scoringStrategy).
"""
    )
