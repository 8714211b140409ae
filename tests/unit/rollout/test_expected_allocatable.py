"""What a node must advertise once the rollout's labels are applied: the check before it is uncordoned."""

from __future__ import annotations

import pytest

from slicewise.catalog import load_catalog
from slicewise.cluster.base import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, GpuNode
from slicewise.rollout.procedure import NodeFailed, expected_allocatable

CATALOG = load_catalog()


def h100_node(gpus: int) -> GpuNode:
    return GpuNode(
        name="h1",
        gpu_product=CATALOG.model("H100-80GB").gpu_product,
        gpu_count=gpus,
        mig_config="all-disabled",
        mig_config_state="success",
        device_plugin_config="",
        allocatable={"nvidia.com/gpu": gpus},
        unschedulable=True,
    )


def test_a_split_config_promises_whole_gpus_and_mig_instances_on_one_node() -> None:
    labels = {MIG_CONFIG_LABEL: "sw-4of8-1gx7", DEVICE_PLUGIN_CONFIG_LABEL: "default"}
    assert expected_allocatable(h100_node(8), labels, CATALOG) == {
        "nvidia.com/gpu": 4,
        "nvidia.com/mig-1g.10gb": 28,
    }


def test_a_split_config_for_another_node_size_fails_the_node_with_the_reason() -> None:
    with pytest.raises(NodeFailed, match="nodes of 8 GPUs, not 4"):
        expected_allocatable(h100_node(4), {MIG_CONFIG_LABEL: "sw-4of8-1gx7"}, CATALOG)
