"""The simulated fleet: nodes, GPUs, their sharing (MIG layout, MPS replicas or whole GPUs) and slots.

A *slot* is where one pod runs: a MIG instance, a whole GPU, or one MPS tenant of a GPU. A *series* is what
dcgm-exporter reports: a MIG instance or a physical GPU (an MPS GPU is one series holding several slots).
``Fleet.layout`` (see :mod:`slicewise.simulator.layout`) flattens the fleet into numpy arrays so the load model
works on all slots at once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from slicewise import schema
from slicewise.catalog.models import GpuModel, load_models
from slicewise.errors import PermanentError
from slicewise.settings import CONFIG_DIR
from slicewise.simulator.layout import Layout, build_layout, resource_name
from slicewise.simulator.load import CycleParams, DeviceParams, LoadClass

SIMULATOR_CONFIG = CONFIG_DIR / "simulator.yaml"
GPU_MODELS_CONFIG = CONFIG_DIR / "gpu_models.yaml"
GPUS_PER_SYNTHETIC_NODE = 8


class FleetConfigError(PermanentError, ValueError):
    """The simulator configuration names an unknown model, profile, workload or an impossible layout."""


@dataclass(frozen=True)
class Workload:
    name: str
    namespace: str
    workload_class: str
    container: str
    gpu_share: float | None = None  # its pods' slicewise.io/gpu-share annotation (config key gpu_share)
    gpu_product: str = ""  # their nodeSelector's nvidia.com/gpu.product (config key gpu_product)
    gpu_sharing: str = ""  # their nodeSelector's nvidia.com/gpu.sharing-strategy (config key gpu_sharing)
    gpu_replicas: str = ""  # their nodeSelector's nvidia.com/gpu.replicas (config key gpu_replicas)
    evictable: bool = False  # their slicewise.io/evictable=true annotation (config key evictable)


@dataclass(frozen=True)
class Node:
    """One Kubernetes GPU node. ``mig_devices`` is the instance list of each MIG GPU; ``mps_replicas`` 0 = no
    MPS. ``mig_gpus``: how many GPUs (the first, by device index) carry ``mig_devices`` under a per-GPU split
    config (``sw-<k>of<n>-*``), the others running whole with MIG disabled; None = every GPU."""

    name: str
    model: str
    gpus: int
    mig_config: str
    device_plugin_config: str
    workloads: tuple[str, ...]
    mig_devices: tuple[tuple[str, int], ...] = ()
    mps_replicas: int = 0
    mig_gpus: int | None = None

    @property
    def sharing(self) -> str:
        """``mig``, ``mps`` or ``none``."""
        return "mig" if self.mig_devices else "mps" if self.mps_replicas else "none"

    @property
    def mig_gpu_count(self) -> int:
        """GPUs with MIG enabled."""
        if not self.mig_devices:
            return 0
        return self.gpus if self.mig_gpus is None else self.mig_gpus

    def gpu_has_mig(self, gpu: int) -> bool:
        """Whether GPU ``gpu`` (device index) carries ``mig_devices``."""
        return gpu < self.mig_gpu_count


class Applied(NamedTuple):
    """What the simulated cluster's MIG-manager emulation has applied to a node (:meth:`Fleet.with_applied`)."""

    mig_config: str
    mig_devices: tuple[tuple[str, int], ...]  # per MIG GPU; empty when MIG is off
    mps_replicas: int  # 0 or 1 = no MPS
    mig_gpus: int | None = None  # GPUs carrying mig_devices (the first ones); None = every GPU


@dataclass(frozen=True, eq=False)
class Fleet:
    """A deterministic simulated fleet. Build it with :meth:`default`, :meth:`from_config` or :meth:`synthetic`."""

    seed: int
    nodes: tuple[Node, ...]
    workloads: Mapping[str, Workload]
    classes: Mapping[str, LoadClass]
    models: Mapping[str, GpuModel]
    cycle: CycleParams
    device: DeviceParams
    pending_window_s: int
    sample_period_s: int
    config: Mapping[str, Any] = field(repr=False)

    # -- construction -------------------------------------------------------------------------------------
    @classmethod
    def default(cls) -> Fleet:
        """The demo fleet of ``include/config/simulator.yaml``."""
        return cls.from_config(load_config())

    @classmethod
    def from_config(cls, config: Mapping[str, Any], models: Mapping[str, GpuModel] | None = None) -> Fleet:
        """A fleet from a parsed ``simulator.yaml``-shaped mapping; raises FleetConfigError on bad input.

        ``models`` defaults to the catalogue's models of ``include/config/gpu_models.yaml``.
        """
        models = dict(models) if models is not None else load_models(GPU_MODELS_CONFIG)
        classes = {name: LoadClass.from_mapping(name, raw) for name, raw in config["classes"].items()}
        workloads = {
            name: Workload(
                name,
                raw["namespace"],
                raw["class"],
                raw["container"],
                schema.parse_gpu_share(str(raw["gpu_share"])) if "gpu_share" in raw else None,
                str(raw.get("gpu_product", "")),
                str(raw.get("gpu_sharing", "")),
                str(raw.get("gpu_replicas", "")),
                bool(raw.get("evictable", False)),
            )
            for name, raw in config["workloads"].items()
        }
        nodes = tuple(_parse_node(raw) for raw in config["nodes"])
        fleet = cls(
            seed=int(config["seed"]),
            nodes=nodes,
            workloads=workloads,
            classes=classes,
            models=models,
            cycle=CycleParams.from_mapping(config["cycle"]),
            device=DeviceParams.from_mapping(config["device"]),
            pending_window_s=int(config["pending"]["window_s"]),
            sample_period_s=int(config["sample_period_s"]),
            config=config,
        )
        fleet.validate()
        return fleet

    @classmethod
    def synthetic(cls, n_gpus: int, seed: int, config: Mapping[str, Any] | None = None) -> Fleet:
        """A fleet of ``n_gpus`` GPUs, 8 per node, cycling through the config's ``synthetic_templates``."""
        if n_gpus < 1:
            raise FleetConfigError(f"n_gpus must be at least 1, got {n_gpus}")
        base = dict(config if config is not None else load_config())
        templates = base["synthetic_templates"]
        nodes = []
        for i in range(math.ceil(n_gpus / GPUS_PER_SYNTHETIC_NODE)):
            template = dict(templates[i % len(templates)])
            model = str(template["model"]).lower().replace("-", "")
            template["name"] = f"syn-{model}-{i:05d}"
            template["gpus"] = min(GPUS_PER_SYNTHETIC_NODE, n_gpus - i * GPUS_PER_SYNTHETIC_NODE)
            nodes.append(template)
        return cls.from_config({**base, "seed": seed, "nodes": nodes})

    def validate(self) -> None:
        """Raise FleetConfigError unless every node's model, MIG layout and workloads exist and fit."""
        names = [node.name for node in self.nodes]
        if not names:
            raise FleetConfigError("a fleet needs at least one node")
        if len(set(names)) != len(names):
            raise FleetConfigError("node names must be unique")
        for wl in self.workloads.values():
            if wl.workload_class not in self.classes:
                raise FleetConfigError(f"workload {wl.name}: unknown class {wl.workload_class!r}")
            if wl.gpu_sharing not in schema.SHARING_STRATEGIES:
                known = ", ".join(schema.SHARING_STRATEGIES[1:])
                raise FleetConfigError(
                    f"workload {wl.name}: gpu_sharing {wl.gpu_sharing!r} is not one of {known}"
                )
            if wl.gpu_replicas and not (wl.gpu_replicas.isdigit() and int(wl.gpu_replicas) >= 1):
                raise FleetConfigError(
                    f"workload {wl.name}: gpu_replicas {wl.gpu_replicas!r} is not a count >= 1"
                )
        for node in self.nodes:
            _validate_node(node, self.models, self.workloads)

    def with_applied(self, layouts: Mapping[str, Applied | tuple[Any, ...]]) -> Fleet:
        """A new, validated fleet with the named nodes' sharing replaced; other nodes stay as they are.

        ``layouts`` maps a node name to what the simulated cluster's MIG-manager emulation has applied
        (:class:`Applied`, or a tuple of its fields). Raises FleetConfigError for an unknown node or a layout that
        does not fit.
        """
        unknown = sorted(set(layouts) - {node.name for node in self.nodes})
        if unknown:
            raise FleetConfigError(f"with_applied: unknown node(s) {', '.join(unknown)}")
        nodes = []
        for node in self.nodes:
            if node.name not in layouts:
                nodes.append(node)
                continue
            mig_config, mig_devices, replicas, mig_gpus = Applied(*layouts[node.name])
            mps = int(replicas) if int(replicas) > 1 else 0  # one "replica" is a whole GPU, not MPS
            # Node.device_plugin_config is descriptive only; name it as the shipped configs are named.
            plugin = (
                node.device_plugin_config if mps == node.mps_replicas else f"mps-{mps}" if mps else "default"
            )
            nodes.append(
                dataclasses.replace(
                    node,
                    mig_config=str(mig_config),
                    mig_devices=tuple((str(p), int(c)) for p, c in mig_devices),
                    mps_replicas=mps,
                    device_plugin_config=plugin,
                    mig_gpus=None if mig_gpus is None or not mig_devices else int(mig_gpus),
                )
            )
        config = dict(self.config)
        if "nodes" in config:  # keep the raw config in step, so from_config(fleet.config) gives this fleet
            config["nodes"] = [_node_config(node) for node in nodes]
        fleet = dataclasses.replace(self, nodes=tuple(nodes), config=config)
        fleet.validate()
        return fleet

    # -- derived ------------------------------------------------------------------------------------------
    @property
    def workload_names(self) -> tuple[str, ...]:
        return tuple(self.workloads)

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self.classes)

    @property
    def n_gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)

    def node_capacity(self) -> dict[tuple[str, str], int]:
        """``{(node, resource): count}`` advertised by the device plugin (capacity == allocatable here)."""
        out: dict[tuple[str, str], int] = {}
        for node in self.nodes:
            for profile, count in node.mig_devices:
                key = (node.name, resource_name(profile))
                out[key] = out.get(key, 0) + count * node.mig_gpu_count
            whole = node.gpus - node.mig_gpu_count
            if whole:
                out[(node.name, "nvidia_com_gpu")] = whole * max(1, node.mps_replicas)
        return out

    @cached_property
    def layout(self) -> Layout:
        return build_layout(self)


def load_config(path: Path | None = None) -> dict[str, Any]:
    """The parsed simulator configuration (``include/config/simulator.yaml`` by default)."""
    data = yaml.safe_load((path or SIMULATOR_CONFIG).read_text())
    if not isinstance(data, dict):
        raise FleetConfigError(f"{path or SIMULATOR_CONFIG}: expected a mapping")
    return data


def _parse_node(raw: Mapping[str, Any]) -> Node:
    mig = raw.get("mig_devices") or {}
    return Node(
        name=str(raw["name"]),
        model=str(raw["model"]),
        gpus=int(raw["gpus"]),
        mig_config=str(raw.get("mig_config", "all-disabled")),
        device_plugin_config=str(raw.get("device_plugin_config", "default")),
        workloads=tuple(raw["workloads"]),
        mig_devices=tuple((str(p), int(c)) for p, c in mig.items()),
        mps_replicas=int(raw.get("mps_replicas", 0) or 0),
        mig_gpus=None if raw.get("mig_gpus") is None else int(raw["mig_gpus"]),
    )


def _node_config(node: Node) -> dict[str, Any]:
    """A node as its ``simulator.yaml`` entry (the inverse of ``_parse_node``)."""
    raw: dict[str, Any] = {
        "name": node.name,
        "model": node.model,
        "gpus": node.gpus,
        "mig_config": node.mig_config,
        "device_plugin_config": node.device_plugin_config,
        "workloads": list(node.workloads),
    }
    if node.mig_devices:
        raw["mig_devices"] = dict(node.mig_devices)
    if node.mps_replicas:
        raw["mps_replicas"] = node.mps_replicas
    if node.mig_gpus is not None:
        raw["mig_gpus"] = node.mig_gpus
    return raw


def _validate_node(node: Node, models: Mapping[str, GpuModel], workloads: Mapping[str, Workload]) -> None:
    where = f"node {node.name}"
    if node.model not in models:
        raise FleetConfigError(f"{where}: unknown GPU model {node.model!r}; known: {', '.join(models)}")
    if node.gpus < 1:
        raise FleetConfigError(f"{where}: needs at least one GPU")
    if not node.workloads or any(w not in workloads for w in node.workloads):
        raise FleetConfigError(f"{where}: workloads {list(node.workloads)} must be known and non-empty")
    if node.mig_devices and node.mps_replicas:
        # k8s-device-plugin: "Sharing with MPS is currently not supported on devices with MIG enabled."
        raise FleetConfigError(f"{where}: MPS and MIG are mutually exclusive")
    if node.mig_gpus is not None and not (node.mig_devices and 0 < node.mig_gpus < node.gpus):
        raise FleetConfigError(f"{where}: mig_gpus must be 1..{node.gpus - 1} GPUs with a MIG layout")
    if node.mps_replicas < 0 or node.mps_replicas > 48:
        raise FleetConfigError(f"{where}: mps_replicas must be 0..48 (device plugin limit)")
    model = models[node.model]
    g_total = mem_total = media = 0
    for profile, count in node.mig_devices:
        if profile not in model.profiles:
            raise FleetConfigError(f"{where}: {node.model} has no MIG profile {profile!r}")
        spec = model.profiles[profile]
        if not 0 < count <= spec.max:
            raise FleetConfigError(f"{where}: {count} x {profile} (at most {spec.max} per GPU)")
        g_total += spec.g * count
        mem_total += spec.mem_slices * count
        media += count if profile.endswith("+me") else 0
    if g_total > model.compute_slices or mem_total > model.memory_slices or media > 1:
        raise FleetConfigError(f"{where}: MIG layout {dict(node.mig_devices)} does not fit a {node.model}")


def describe(fleet: Fleet) -> str:
    """One line per node: model, GPUs, sharing and labels (for the CLI and logs)."""
    lines = []
    for node in fleet.nodes:
        sharing = (
            f"MIG {dict(node.mig_devices)}"
            + ("" if node.mig_gpus is None else f" on GPUs 0-{node.mig_gpus - 1}, the others whole")
            if node.mig_devices
            else f"MPS x{node.mps_replicas}"
            if node.mps_replicas
            else "whole GPUs"
        )
        lines.append(
            f"{node.name}: {node.gpus} x {node.model}, {sharing}, mig.config={node.mig_config}, "
            f"device-plugin.config={node.device_plugin_config}, workloads={','.join(node.workloads)}"
        )
    return "\n".join(lines)
