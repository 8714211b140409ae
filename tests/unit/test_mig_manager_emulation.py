"""The simulated cluster's MIG manager and device plugin, as NVIDIA/mig-parted (``pkg/mig/reconfigure``) and the
k8s-device-plugin's config handling describe the real ones: what a label change does, when, and how it fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slicewise.cluster.base import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, GpuNode
from slicewise.simulator.cluster import SimulatedCluster
from slicewise.simulator.exporter import FleetCollector
from slicewise.simulator.fleet import Applied, Fleet
from slicewise.simulator.frames import demand_rows
from slicewise.simulator.mig_manager import OPERAND_LABELS, PAUSED
from tests.support.clock import FakeClock

RECONFIGURE_S = 20


@pytest.fixture
def cluster(open_cluster: Callable[[float], SimulatedCluster]) -> SimulatedCluster:
    return open_cluster(RECONFIGURE_S)


def drain(cluster: SimulatedCluster, node: str) -> None:
    """What the rollout does before a MIG change: cordon, then evict every GPU pod."""
    cluster.cordon(node)
    for pod in cluster.list_gpu_pods(node):
        cluster.evict(pod.namespace, pod.name)
    assert cluster.list_gpu_pods(node) == []


def select(cluster: SimulatedCluster, node: str, config: str) -> GpuNode:
    return cluster.set_labels(node, {MIG_CONFIG_LABEL: config}, expected={})


def operands(node: GpuNode) -> set[str]:
    return {node.labels[label] for label in OPERAND_LABELS}


def conditions(cluster: SimulatedCluster, node: str) -> tuple[str, ...]:
    return next(row.conditions for row in cluster.status() if row.node.name == node)


# -- reacting to nvidia.com/mig.config ------------------------------------------------------------------------
def test_given_the_same_value_rewritten_then_nothing_happens(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    before = cluster.get_node("sim-a100-80-0")
    select(cluster, "sim-a100-80-0", "all-balanced")
    assert cluster.get_node("sim-a100-80-0") == before  # no transition, not even a new resourceVersion
    # and after a failure, re-writing the same value does not retry (the informer sees no change)
    select(cluster, "sim-a100-80-0", "no-such-config")
    failed = cluster.get_node("sim-a100-80-0")
    assert failed.mig_config_state == "failed"
    select(cluster, "sim-a100-80-0", "no-such-config")
    clock.now += 3600
    assert cluster.get_node("sim-a100-80-0") == failed


@pytest.mark.parametrize("config", ["no-such-config", "all-1g.5gb"])  # unknown; no layout for an A100-80GB
def test_given_an_invalid_config_then_failed_at_once(cluster: SimulatedCluster, config: str) -> None:
    before = cluster.get_node("sim-a100-80-0")
    select(cluster, "sim-a100-80-0", config)
    node = cluster.get_node("sim-a100-80-0")
    assert node.mig_config_state == "failed"
    assert operands(node) == {"true"}  # setState(failed) leaves the operands running
    assert node.allocatable == before.allocatable
    assert any(config in c for c in conditions(cluster, "sim-a100-80-0"))


def test_given_the_applied_layout_selected_again_then_success_without_pending(
    cluster: SimulatedCluster,
) -> None:
    select(cluster, "sim-a100-40-0", "no-such-config")
    assert cluster.get_node("sim-a100-40-0").mig_config_state == "failed"
    # Pods run on every GPU, yet nothing is applied: mig-parted assert finds the layout already there.
    assert cluster.list_gpu_pods("sim-a100-40-0")
    select(cluster, "sim-a100-40-0", "all-1g.5gb")
    node = cluster.get_node("sim-a100-40-0")
    assert node.mig_config_state == "success" and operands(node) == {"true"}
    assert node.allocatable == {"nvidia.com/mig-1g.5gb": 28}


def test_given_a_drained_node_when_the_config_changes_then_pending_then_success(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    drain(cluster, "sim-a100-80-0")
    written = select(cluster, "sim-a100-80-0", "all-3g.40gb")
    assert written.mig_config_state == "success"  # the patch answer: the manager has not reacted yet

    pending = cluster.get_node("sim-a100-80-0")
    assert pending.mig_config_state == "pending"
    assert operands(pending) == {PAUSED}
    assert pending.allocatable == written.allocatable  # nothing applied yet
    clock.now += RECONFIGURE_S - 1
    assert cluster.get_node("sim-a100-80-0").mig_config_state == "pending"
    assert cluster.applied_layouts()["sim-a100-80-0"][0] == "all-balanced"

    clock.now += 1
    done = cluster.get_node("sim-a100-80-0")
    assert done.mig_config_state == "success"
    assert operands(done) == {"true"}
    assert done.allocatable == {"nvidia.com/mig-3g.40gb": 8}
    assert done.labels["nvidia.com/mig-3g.40gb.count"] == "8"
    assert "nvidia.com/mig-1g.10gb.count" not in done.labels  # GFD relabelled
    assert cluster.applied_layouts()["sim-a100-80-0"] == Applied("all-3g.40gb", (("3g.40gb", 2),), 1)
    # the new MIG devices hold new pods as soon as the node takes pods again, not while it is cordoned
    assert cluster.list_gpu_pods("sim-a100-80-0") == []
    cluster.uncordon("sim-a100-80-0")
    pods = cluster.list_gpu_pods("sim-a100-80-0")
    assert pods and all(p.requests == {"nvidia.com/mig-3g.40gb": 1} for p in pods)


def test_given_user_pods_on_the_gpus_then_the_apply_fails(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    assert cluster.list_gpu_pods("sim-h200-0")  # not drained: the MIG manager does not evict user pods
    select(cluster, "sim-h200-0", "all-7g.141gb")
    assert cluster.get_node("sim-h200-0").mig_config_state == "pending"
    clock.now += RECONFIGURE_S
    node = cluster.get_node("sim-h200-0")
    assert node.mig_config_state == "failed"
    assert operands(node) == {"true"}
    assert node.allocatable == {"nvidia.com/mig-3g.71gb": 8}
    assert any("in use by" in c for c in conditions(cluster, "sim-h200-0"))


def test_given_a_fail_fault_then_the_next_apply_fails_and_the_one_after_works(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    drain(cluster, "sim-a100-80-0")
    cluster.inject_fault("sim-a100-80-0", "fail")
    select(cluster, "sim-a100-80-0", "all-3g.40gb")
    clock.now += RECONFIGURE_S
    failed = cluster.get_node("sim-a100-80-0")
    assert failed.mig_config_state == "failed" and operands(failed) == {"true"}
    assert failed.allocatable["nvidia.com/mig-1g.10gb"] == 8
    select(cluster, "sim-a100-80-0", "all-2g.20gb")  # a new value: the manager tries again
    clock.now += RECONFIGURE_S
    assert cluster.get_node("sim-a100-80-0").allocatable == {"nvidia.com/mig-2g.20gb": 12}


def test_given_a_stuck_fault_then_pending_forever_until_the_manager_restarts(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    drain(cluster, "sim-a100-80-0")
    cluster.inject_fault("sim-a100-80-0", "stuck")
    select(cluster, "sim-a100-80-0", "all-3g.40gb")
    clock.now += 86_400
    stuck = cluster.get_node("sim-a100-80-0")
    assert stuck.mig_config_state == "pending" and operands(stuck) == {PAUSED}
    assert any("stuck" in c for c in conditions(cluster, "sim-a100-80-0"))
    cluster.inject_fault("sim-a100-80-0", "none")  # like deleting the mig-manager pod: it runs again
    clock.now += RECONFIGURE_S
    assert cluster.get_node("sim-a100-80-0").mig_config_state == "success"


def test_given_the_label_removed_then_the_operator_puts_all_disabled_back(cluster: SimulatedCluster) -> None:
    cluster.set_labels("sim-h100-0", {MIG_CONFIG_LABEL: None}, expected={})
    node = cluster.get_node("sim-h100-0")
    assert (node.mig_config, node.mig_config_state) == ("all-disabled", "success")


def test_given_evicted_pods_when_another_node_is_reconfigured_then_they_stay_evicted(
    cluster: SimulatedCluster, fleet: Fleet, clock: FakeClock
) -> None:
    # sim-h100-1 shares vision-infer and search-embed with sim-a100-40-0, whose slot count decides how the
    # pods of sim-h100-1 are numbered: its pods get new names when sim-a100-40-0 changes layout.
    drain(cluster, "sim-h100-1")
    drain(cluster, "sim-a100-40-0")
    select(cluster, "sim-a100-40-0", "all-3g.20gb")
    clock.now += RECONFIGURE_S
    assert cluster.get_node("sim-a100-40-0").allocatable == {"nvidia.com/mig-3g.20gb": 8}
    after = FleetCollector(fleet, clock=clock, state_path=cluster.state_path).fleet_at(clock.now)
    assert _pod_names(after, "sim-h100-1", clock.now) != _pod_names(fleet, "sim-h100-1", clock.now)
    assert cluster.list_gpu_pods("sim-h100-1") == []


def _pod_names(fleet: Fleet, node: str, at: float) -> set[str]:
    rows = demand_rows(fleet, [int(at)])
    return set(rows["pod"][rows["node"] == node].tolist())


# -- the device plugin ----------------------------------------------------------------------------------------
def plugin(cluster: SimulatedCluster, node: str, config: str) -> None:
    cluster.set_labels(node, {DEVICE_PLUGIN_CONFIG_LABEL: config}, expected={})


def test_given_an_mps_config_then_allocatable_is_gpus_times_replicas_after_the_delay(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    plugin(cluster, "sim-h100-0", "mps-8")
    assert cluster.get_node("sim-h100-0").allocatable == {"nvidia.com/gpu": 4}
    clock.now += RECONFIGURE_S
    node = cluster.get_node("sim-h100-0")
    assert node.allocatable == {"nvidia.com/gpu": 32}
    assert node.labels["nvidia.com/gpu.replicas"] == "8"
    assert node.gpu_product.endswith("-SHARED") and node.gpu_count == 4
    assert cluster.applied_layouts()["sim-h100-0"][2] == 8
    plugin(cluster, "sim-h100-0", "default")
    clock.now += RECONFIGURE_S
    assert cluster.get_node("sim-h100-0").allocatable == {"nvidia.com/gpu": 4}


def test_given_an_unknown_device_plugin_config_then_it_is_skipped(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    plugin(cluster, "sim-h100-1", "mps-5")
    clock.now += RECONFIGURE_S
    assert cluster.get_node("sim-h100-1").allocatable == {"nvidia.com/gpu": 16}
    assert any("mps-5" in c and "skipped" in c for c in conditions(cluster, "sim-h100-1"))


def test_given_mps_on_a_mig_node_then_the_plugin_refuses(cluster: SimulatedCluster, clock: FakeClock) -> None:
    plugin(cluster, "sim-a100-40-0", "mps-4")
    clock.now += RECONFIGURE_S
    node = cluster.get_node("sim-a100-40-0")
    assert node.allocatable == {"nvidia.com/mig-1g.5gb": 28}
    assert cluster.applied_layouts()["sim-a100-40-0"][2] == 1
    assert any("MIG" in c for c in conditions(cluster, "sim-a100-40-0"))


def test_given_mig_disabled_under_an_mps_label_then_the_restarted_plugin_applies_mps(
    cluster: SimulatedCluster, clock: FakeClock
) -> None:
    plugin(cluster, "sim-a100-40-0", "mps-4")  # refused while MIG is on
    drain(cluster, "sim-a100-40-0")
    select(cluster, "sim-a100-40-0", "all-disabled")
    clock.now += RECONFIGURE_S
    node = cluster.get_node("sim-a100-40-0")
    assert node.allocatable == {"nvidia.com/gpu": 16}
    assert conditions(cluster, "sim-a100-40-0") == ()


def test_given_a_per_gpu_split_config_then_half_the_gpus_carry_it_and_the_others_run_whole(
    cluster: SimulatedCluster, fleet: Fleet, clock: FakeClock
) -> None:
    # sim-a100-80-0 has 4 GPUs: sw-2of4-* gives GPUs 0-1 one 3g, one 2g and two 1g instances, GPUs 2-3 no MIG.
    drain(cluster, "sim-a100-80-0")
    select(cluster, "sim-a100-80-0", "sw-2of4-3g-2g-1gx2")
    clock.now += RECONFIGURE_S
    node = cluster.get_node("sim-a100-80-0")
    assert node.mig_config_state == "success"
    assert node.allocatable == {
        "nvidia.com/mig-3g.40gb": 2,
        "nvidia.com/mig-2g.20gb": 2,
        "nvidia.com/mig-1g.10gb": 4,
        "nvidia.com/gpu": 2,
    }
    assert node.labels["nvidia.com/mig-1g.10gb.count"] == "4"
    assert cluster.applied_layouts()["sim-a100-80-0"].mig_gpus == 2
    # what dcgm-exporter reports follows: four MIG instances on each of GPUs 0-1, one whole device on 2 and 3
    after = FleetCollector(fleet, clock=clock, state_path=cluster.state_path).fleet_at(clock.now)
    layout = after.layout
    node_no = next(i for i, n in enumerate(after.nodes) if n.name == "sim-a100-80-0")
    on_node = layout.series_node == node_no
    per_gpu = {gpu: int((on_node & (layout.series_gpu == gpu)).sum()) for gpu in range(4)}
    assert per_gpu == {0: 4, 1: 4, 2: 1, 3: 1}
    whole = [
        layout.series_profile[r] for r in range(layout.n_series) if on_node[r] and layout.series_gpu[r] >= 2
    ]
    assert whole == ["", ""]


def test_given_a_split_config_for_another_node_size_then_failed_at_once_with_the_reason(
    cluster: SimulatedCluster,
) -> None:
    before = cluster.get_node("sim-a100-80-0")
    select(cluster, "sim-a100-80-0", "sw-4of8-3g-2g-1gx2")  # for 8-GPU nodes; this one has 4
    node = cluster.get_node("sim-a100-80-0")
    assert node.mig_config_state == "failed"
    assert node.allocatable == before.allocatable
    assert any("nodes of 8 GPUs, not 4" in c for c in conditions(cluster, "sim-a100-80-0"))
