"""The exporter serves the layouts the simulated cluster's MIG manager has applied, not the configured ones."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from slicewise.cluster.base import MIG_CONFIG_LABEL
from slicewise.simulator.cluster import SimulatedCluster
from slicewise.simulator.exporter import FleetCollector
from slicewise.simulator.fleet import Applied, Fleet, FleetConfigError
from tests.support.clock import WORKDAY_INSTANT, FakeClock

NODE = "sim-a100-80-0"


def instances(collector: FleetCollector) -> dict[str, set[tuple[str, str, str, str]]]:
    """node -> {(gpu, UUID, GPU_I_PROFILE, GPU_I_ID)} of the scrape's GR_ENGINE_ACTIVE series (one per instance)."""
    family = next(m for m in collector.collect() if m.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    out: dict[str, set[tuple[str, str, str, str]]] = defaultdict(set)
    for sample in family.samples:
        labels = sample.labels
        out[labels["Hostname"]].add(
            (labels["gpu"], labels["UUID"], labels.get("GPU_I_PROFILE", ""), labels.get("GPU_I_ID", ""))
        )
    return out


def allocatable(collector: FleetCollector, node: str) -> dict[str, float]:
    family = next(m for m in collector.collect() if m.name == "kube_node_status_allocatable")
    return {s.labels["resource"]: s.value for s in family.samples if s.labels["node"] == node}


def test_given_a_completed_reconfiguration_then_the_nodes_series_switch_profiles(
    open_cluster: Callable[[float], SimulatedCluster], fleet: Fleet, clock: FakeClock
) -> None:
    cluster = open_cluster(20)
    collector = FleetCollector(fleet, clock=clock, state_path=cluster.state_path)
    before = instances(collector)
    assert before == instances(FleetCollector(fleet, clock=clock))  # a fresh state is the configured fleet
    assert {p for _, _, p, _ in before[NODE]} == {"1g.10gb", "2g.20gb", "3g.40gb"}

    cluster.cordon(NODE)
    for pod in cluster.list_gpu_pods(NODE):
        cluster.evict(pod.namespace, pod.name)
    cluster.set_labels(NODE, {MIG_CONFIG_LABEL: "all-3g.40gb"}, expected={MIG_CONFIG_LABEL: "all-balanced"})
    assert instances(collector) == before  # pending: the old MIG devices are still there

    # when the reconfiguration comes due, with no other process touching the state: the scrape advances it
    clock.now += 20
    after = instances(collector)
    assert {p for _, _, p, _ in after[NODE]} == {"3g.40gb"}
    assert len(after[NODE]) == 4 * 2  # 4 GPUs x 2 instances
    assert {uuid for _, uuid, _, _ in after[NODE]} == {uuid for _, uuid, _, _ in before[NODE]}  # same GPUs
    assert {n: s for n, s in after.items() if n != NODE} == {n: s for n, s in before.items() if n != NODE}
    assert allocatable(collector, NODE) == {"nvidia_com_mig_3g_40gb": 8}
    assert cluster.get_node(NODE).mig_config_state == "success"


def test_given_mps_applied_then_the_gpu_series_carry_no_pod_and_capacity_multiplies(
    open_cluster: Callable[[float], SimulatedCluster], fleet: Fleet, clock: FakeClock
) -> None:
    cluster = open_cluster(0)
    collector = FleetCollector(fleet, clock=clock, state_path=cluster.state_path)
    assert allocatable(collector, "sim-h100-0") == {"nvidia_com_gpu": 4}
    cluster.set_labels("sim-h100-0", {"nvidia.com/device-plugin.config": "mps-8"}, expected={})
    clock.now += 1
    assert allocatable(collector, "sim-h100-0") == {"nvidia_com_gpu": 32}


def test_given_no_state_file_then_the_configured_fleet_is_served(tmp_path: Path, fleet: Fleet) -> None:
    collector = FleetCollector(fleet, clock=lambda: WORKDAY_INSTANT, state_path=tmp_path / "missing.json")
    assert collector.fleet_at(WORKDAY_INSTANT) is fleet
    plain = FleetCollector(fleet, clock=lambda: WORKDAY_INSTANT)
    assert instances(collector) == instances(plain)
    assert not (tmp_path / "missing.json").exists()  # the exporter never creates the state


def test_given_an_unchanged_state_file_then_the_fleet_is_reused(tmp_path: Path, fleet: Fleet) -> None:
    SimulatedCluster.open(tmp_path / "state.json", fleet=fleet, clock=lambda: WORKDAY_INSTANT)
    collector = FleetCollector(fleet, clock=lambda: WORKDAY_INSTANT, state_path=tmp_path / "state.json")
    first = collector.fleet_at(WORKDAY_INSTANT)
    assert collector.fleet_at(WORKDAY_INSTANT + 60) is first


def test_given_applied_layouts_then_with_applied_changes_only_those_nodes(fleet: Fleet) -> None:
    changed = fleet.with_applied({"sim-h100-0": ("all-7g.80gb", (("7g.80gb", 1),), 1)})
    node = next(n for n in changed.nodes if n.name == "sim-h100-0")
    assert (node.mig_config, node.mig_devices, node.sharing) == ("all-7g.80gb", (("7g.80gb", 1),), "mig")
    assert [n for n in changed.nodes if n.name != "sim-h100-0"] == [
        n for n in fleet.nodes if n.name != "sim-h100-0"
    ]
    assert Fleet.from_config(changed.config).nodes == changed.nodes
    mps = fleet.with_applied({"sim-h100-1": ("all-disabled", (), 1)})
    assert next(n for n in mps.nodes if n.name == "sim-h100-1").sharing == "none"
    with pytest.raises(FleetConfigError):
        fleet.with_applied({"nope": ("all-disabled", (), 1)})
    with pytest.raises(FleetConfigError):
        fleet.with_applied({"sim-h100-0": ("x", (("7g.80gb", 2),), 1)})


def test_given_a_split_applied_then_capacity_and_scrape_show_mig_gpus_and_whole_gpus(
    fleet: Fleet, clock: FakeClock
) -> None:
    split = Applied("sw-2of4-3g-2g-1gx2", (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)), 1, 2)
    changed = fleet.with_applied({NODE: split})
    node = next(n for n in changed.nodes if n.name == NODE)
    assert [node.gpu_has_mig(gpu) for gpu in range(node.gpus)] == [True, True, False, False]
    capacity = {res: n for (name, res), n in changed.node_capacity().items() if name == NODE}
    assert capacity == {
        "nvidia_com_mig_1g_10gb": 4,
        "nvidia_com_mig_2g_20gb": 2,
        "nvidia_com_mig_3g_40gb": 2,
        "nvidia_com_gpu": 2,
    }
    assert Fleet.from_config(changed.config).nodes == changed.nodes  # mig_gpus survives the config round trip
    scraped = instances(FleetCollector(changed, clock=clock))[NODE]
    profiles = {gpu: sorted(p for g, _, p, _ in scraped if g == gpu) for gpu in ("0", "1", "2", "3")}
    assert profiles["0"] == profiles["1"] == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert profiles["2"] == profiles["3"] == [""]  # a whole GPU: no GPU_I_PROFILE label
    for bad in (0, 4):
        with pytest.raises(FleetConfigError, match="mig_gpus"):
            fleet.with_applied({NODE: split._replace(mig_gpus=bad)})
