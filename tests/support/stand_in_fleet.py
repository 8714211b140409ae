"""The default simulated fleet's nodes served by the stand-in API server, and a tiny GPU Operator for it.

The stand-in is an API server only: nothing reacts to a label. :class:`StandInOperator` plays the MIG manager
and the device plugin when a test wants a change to complete (``react()``), or stays idle so the old
``success`` is stale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slicewise.catalog import layout_capacity, load_catalog
from slicewise.cluster.base import ClusterBackend, GpuNode, is_gpu_resource
from slicewise.simulator.fleet import Fleet
from tests.support.fake_apiserver import FakeApiServer
from tests.support.k8s_objects import gpu_node, gpu_pod

TOKEN = "stand-in-token"


def fleet_api_server(
    pods: Sequence[Mapping[str, Any]] = (), pdbs: Sequence[Mapping[str, Any]] = ()
) -> FakeApiServer:
    catalog = load_catalog()
    nodes = []
    for node in Fleet.default().nodes:
        model = catalog.model(node.model)
        capacity = layout_capacity(
            model,
            catalog.layout_of(node.mig_config, model.name),
            node.gpus,
            catalog.mps_replicas(node.device_plugin_config),
        )
        nodes.append(
            gpu_node(
                node.name,
                product=model.gpu_product,
                gpu_count=node.gpus,
                mig_config=node.mig_config,
                allocatable=capacity,
                device_plugin_config=node.device_plugin_config,
            )
        )
    return FakeApiServer(nodes=nodes, pods=pods, pdbs=pdbs, token=TOKEN)


def serving_pod(
    node: str, name: str = "svc-0", resource: str = "nvidia.com/gpu", **kwargs: Any
) -> dict[str, Any]:
    return gpu_pod("team-a", name, node=node, gpus={resource: 1}, labels={"app": name}, **kwargs)


class StandInOperator:
    """Completes label changes the way the GPU Operator would: state ``success`` (on GPUs with MIG) and the new
    allocatable."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        self.catalog = load_catalog()
        self.idle = False

    def react(self, name: str) -> None:
        if self.idle:
            return

        def apply(node: dict[str, Any]) -> None:
            labels = node["metadata"]["labels"]
            model = self.catalog.model_for_product(labels["nvidia.com/gpu.product"])
            assert model is not None
            layout = self.catalog.layout_of(labels.get("nvidia.com/mig.config") or "all-disabled", model.name)
            replicas = self.catalog.mps_replicas(labels.get("nvidia.com/device-plugin.config") or "default")
            wanted = layout_capacity(model, layout, int(labels["nvidia.com/gpu.count"]), replicas)
            allocatable = node["status"]["allocatable"]
            for key in [k for k in allocatable if is_gpu_resource(k)]:
                del allocatable[key]
            allocatable.update({k: str(v) for k, v in wanted.items()})
            if model.mig:  # without MIG there is no MIG manager: only the device plugin reacts
                labels["nvidia.com/mig.config.state"] = "success"

        self.api.update_node_externally(name, apply)


class Reacting:
    """A cluster backend whose GPU Operator acts between the control plane's reads."""

    def __init__(self, backend: ClusterBackend, operator: StandInOperator) -> None:
        self.backend, self.operator = backend, operator
        self.name = backend.name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.backend, attribute)

    def get_node(self, name: str) -> GpuNode:
        self.operator.react(name)
        return self.backend.get_node(name)
