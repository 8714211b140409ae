"""The simulated fleet: the shipped demo fleet's shape, layout checks, synthetic fleets for benchmarks."""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slicewise.catalog import load_catalog
from slicewise.planning.config import PlannerConfig
from slicewise.simulator.fleet import Fleet, FleetConfigError, load_config
from slicewise.simulator.frames import gpu_samples
from slicewise.simulator.layout import KIND_MIG, KIND_MPS, KIND_WHOLE, resource_name


def _config_with_nodes(*nodes: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(load_config())
    config["nodes"] = list(nodes)
    return config


def test_default_fleet_mixes_mig_mps_and_whole_gpus_of_real_models() -> None:
    # given the shipped configuration
    fleet = Fleet.default()
    models = load_catalog().models

    # then it is the ~6 node / ~24 GPU demo fleet with every sharing kind and the four target models
    assert 5 <= len(fleet.nodes) <= 8
    assert 20 <= fleet.n_gpus <= 32
    assert {node.sharing for node in fleet.nodes} == {"mig", "mps", "none"}
    assert {node.model for node in fleet.nodes} == {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}
    for node in fleet.nodes:
        assert node.mig_config and node.device_plugin_config
        for profile, _ in node.mig_devices:
            assert profile in models[node.model].profiles


def test_layout_has_one_series_per_mig_instance_and_per_whole_or_mps_gpu() -> None:
    # given the default fleet
    fleet = Fleet.default()
    layout = fleet.layout

    # then series and slots add up from the node specs
    expected_series = sum(
        node.gpus * (sum(c for _, c in node.mig_devices) if node.mig_devices else 1) for node in fleet.nodes
    )
    expected_slots = sum(
        node.gpus * (sum(c for _, c in node.mig_devices) if node.mig_devices else max(1, node.mps_replicas))
        for node in fleet.nodes
    )
    assert layout.n_series == expected_series
    assert layout.n_slots == expected_slots
    assert layout.n_phys == fleet.n_gpus
    # and each MPS series holds its node's replicas as slots
    slots_per_series = np.bincount(layout.slot_series, minlength=layout.n_series)
    for r in range(layout.n_series):
        node = fleet.nodes[layout.series_node[r]]
        assert layout.series_kind[r] == {"mig": KIND_MIG, "mps": KIND_MPS, "none": KIND_WHOLE}[node.sharing]
        assert slots_per_series[r] == (node.mps_replicas if node.sharing == "mps" else 1)


def test_mig_instance_capacity_is_the_profile_memory_and_ids_are_unique_per_gpu() -> None:
    fleet = Fleet.default()
    layout = fleet.layout
    models = load_catalog().models
    seen: set[tuple[int, int, str]] = set()
    for r in np.flatnonzero(layout.series_kind == KIND_MIG).tolist():
        node = fleet.nodes[layout.series_node[r]]
        profile = layout.series_profile[r]
        assert layout.series_capacity_mib[r] == models[node.model].profiles[profile].memory_mib
        key = (int(layout.series_node[r]), int(layout.series_gpu[r]), layout.series_instance_id[r])
        assert key not in seen
        seen.add(key)


def test_mps_tenants_share_the_gpu_memory_equally() -> None:
    fleet = Fleet.default()
    layout = fleet.layout
    mps_series = np.flatnonzero(layout.series_kind == KIND_MPS)
    assert len(mps_series)
    for r in mps_series.tolist():
        tenants = layout.slot_capacity_mib[layout.slot_series == r]
        assert tenants.sum() == pytest.approx(layout.series_capacity_mib[r])


def test_node_capacity_counts_mig_resources_and_mps_replicas() -> None:
    # given one MIG node (2 GPUs x balanced) and one MPS node (2 GPUs x 4 replicas)
    config = _config_with_nodes(
        {"name": "a", "model": "A100-80GB", "gpus": 2, "mig_devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
         "workloads": ["vision-infer"]},
        {"name": "b", "model": "H100-80GB", "gpus": 2, "mps_replicas": 4, "workloads": ["notebook"]},
    )  # fmt: skip

    # when
    capacity = Fleet.from_config(config).node_capacity()

    # then resources are named as kube-state-metrics sanitises them
    assert capacity == {
        ("a", "nvidia_com_mig_1g_10gb"): 4,
        ("a", "nvidia_com_mig_2g_20gb"): 2,
        ("a", "nvidia_com_mig_3g_40gb"): 2,
        ("b", "nvidia_com_gpu"): 8,
    }


def test_resource_name_follows_device_plugin_and_ksm_sanitising() -> None:
    assert resource_name("") == "nvidia_com_gpu"
    assert resource_name("1g.10gb") == "nvidia_com_mig_1g_10gb"
    assert resource_name("1g.10gb+me") == "nvidia_com_mig_1g_10gb_me"


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"model": "T4"}, "unknown GPU model"),
        ({"mig_devices": {"1g.99gb": 1}}, "no MIG profile"),
        ({"mig_devices": {"3g.40gb": 3}}, "at most 2"),
        ({"mig_devices": {"3g.40gb": 2, "2g.20gb": 1}}, "does not fit"),
        ({"mig_devices": {"1g.10gb": 1}, "mps_replicas": 2}, "mutually exclusive"),
        ({"workloads": ["nobody"]}, "workloads"),
    ],
)
def test_impossible_nodes_are_rejected_with_a_reason(node: dict[str, Any], message: str) -> None:
    # given a node that breaks one rule
    spec = {"name": "x", "model": "A100-80GB", "gpus": 1, "workloads": ["vision-infer"], **node}

    # then building the fleet fails and says why
    with pytest.raises(FleetConfigError, match=message):
        Fleet.from_config(_config_with_nodes(spec))


@pytest.mark.parametrize(
    ("form", "message"),
    [({"gpu_sharing": "MPS"}, "gpu_sharing 'MPS' is not one of"), ({"gpu_replicas": "0"}, "not a count")],
)
def test_a_workload_pinning_an_impossible_sharing_mode_is_rejected(
    form: dict[str, str], message: str
) -> None:
    config = load_config()
    config["workloads"]["vision-infer"] |= form
    with pytest.raises(FleetConfigError, match=message):
        Fleet.from_config(config)


@pytest.mark.parametrize("n_gpus", [1, 20, 1000])
def test_synthetic_fleet_has_the_requested_gpus_eight_per_node(n_gpus: int) -> None:
    fleet = Fleet.synthetic(n_gpus, seed=7)
    assert fleet.n_gpus == n_gpus
    assert all(node.gpus <= 8 for node in fleet.nodes)
    assert len(fleet.nodes) == -(-n_gpus // 8)
    assert fleet.layout.n_phys == n_gpus


def test_synthetic_fleets_differ_by_seed_and_repeat_for_the_same_seed() -> None:
    a, b, c = Fleet.synthetic(16, seed=1), Fleet.synthetic(16, seed=1), Fleet.synthetic(16, seed=2)
    assert a.layout.phys_uuid == b.layout.phys_uuid
    assert np.array_equal(a.layout.slot_key, b.layout.slot_key)
    assert set(a.layout.phys_uuid).isdisjoint(c.layout.phys_uuid)


def test_gpu_uuids_and_bus_ids_look_like_nvml_and_are_unique() -> None:
    layout = Fleet.synthetic(64, seed=3).layout
    assert len(set(layout.phys_uuid)) == 64
    assert all(u.startswith("GPU-") and len(u) == 40 for u in layout.phys_uuid)
    assert all(b.startswith("00000000:") and b.endswith(":00.0") for b in layout.phys_pci_bus_id)


def test_class_parameters_are_checked() -> None:
    config = copy.deepcopy(load_config())
    config["classes"]["notebook"]["busy_share"] = 1.5
    with pytest.raises(ValueError, match="busy_share"):
        Fleet.from_config(config)
    del config["classes"]["notebook"]["busy_share"]
    with pytest.raises(ValueError, match="missing parameter"):
        Fleet.from_config(config)


def test_the_demo_fleet_has_a_node_the_thresholds_rule_may_change_at_almost_any_hour() -> None:
    # The demo's cycle (tests/integration/test_demo_cycle.py) must show a rollout whatever the hour it runs at. It
    # did not in working hours when the only node under the band ran a training Job, which may not be evicted.
    # A node without MIG whose pods may all be evicted and whose hourly P90 load is under planner_low_util is
    # one the thresholds rule gives more MPS tenants; at least one must be so in 99 % of three weeks' hours.
    config = load_config()
    evictable = {name for name, w in config["workloads"].items() if w.get("evictable")}
    candidates = {
        n["name"]
        for n in config["nodes"]
        if n["mig_config"] == "all-disabled" and set(n["workloads"]) <= evictable
    }
    monday = 1_764_547_200  # 2025-12-01 00:00 UTC
    samples = gpu_samples(Fleet.default(), np.arange(monday, monday + 21 * 86_400, 300))
    samples = samples[samples["hostname"].isin(candidates)]
    per_node = samples.groupby(["hostname", "timestamp"], observed=True)["engine_active"].mean().reset_index()
    per_node["hour"] = per_node["timestamp"].dt.floor("h")
    p90 = per_node.groupby(["hour", "hostname"], observed=True)["engine_active"].quantile(0.9).unstack()
    changeable = (p90 < PlannerConfig().low_util).any(axis=1)
    assert len(changeable) == 21 * 24
    assert changeable.mean() >= 0.99, p90[~changeable]


def test_the_demos_pending_tolerance_covers_the_simulators_pending_redraws() -> None:
    # The analysis fails a wave whose pool-wide pending GPU requests rise by more than
    # analysis_pending_tolerance. The simulator re-draws its pending pods every pending window whatever the
    # rollout does, so a demo wave (bake + checks + reconfiguration) must fit in one window, and the rise across
    # one re-draw, in three weeks of the demo fleet, must stay within the demo's tolerance (at 13:15 UTC it was
    # 16 -> 21 against the shipped 2, and the demo rolled back for noise).
    from slicewise.demo import DEMO_SETTINGS
    from slicewise.simulator.frames import demand_rows

    fleet = Fleet.default()
    wave_s = (
        float(DEMO_SETTINGS["SLICEWISE_ANALYSIS_BAKE_S"])
        + float(DEMO_SETTINGS["SLICEWISE_ANALYSIS_INTERVAL_S"])
        * int(DEMO_SETTINGS["SLICEWISE_ANALYSIS_COUNT"])
        + float(DEMO_SETTINGS["SLICEWISE_SIMULATED_RECONFIGURE_S"])
    )
    assert wave_s < fleet.pending_window_s
    monday = 1_764_547_200  # 2025-12-01 00:00 UTC
    windows = np.arange(monday, monday + 21 * 86_400, fleet.pending_window_s)
    rows = demand_rows(fleet, windows)
    pending = rows["unschedulable"]
    requested = np.bincount(
        np.searchsorted(windows, rows["timestamp"][pending]),
        weights=rows["requested"][pending],
        minlength=len(windows),
    )
    rise = np.diff(requested)
    assert requested.max() > 0 and rise.max() > 2  # the noise the shipped tolerance of 2 does not cover
    assert rise.max() <= float(DEMO_SETTINGS["SLICEWISE_ANALYSIS_PENDING_TOLERANCE"])


def test_the_demos_first_plan_changes_a_node_at_every_hour_of_a_working_day(tmp_path: Path) -> None:
    # The demo's cycle (tests/integration/test_demo_cycle.py) asserts a rollout, and CI runs it at whatever hour
    # it runs. Here the demo's planner settings plan the demo fleet at each hour of a simulated Wednesday, as
    # its first cycle does: the simulated cluster at that moment, and the baseline forecasts (no champion yet)
    # from the hours of samples the forecasting front door reads.
    from datetime import UTC, datetime

    from slicewise.demo import DEMO_SETTINGS
    from slicewise.forecasting import forecasts as fc
    from slicewise.forecasting.spec import load_specs
    from slicewise.planning.planner import plan_fleet
    from slicewise.planning.types import CHANGE, NodeObservation
    from slicewise.settings import load_settings
    from slicewise.simulator.cluster import SimulatedCluster
    from slicewise.simulator.frames import demand

    settings = load_settings(environ=DEMO_SETTINGS)
    config = PlannerConfig.from_settings(settings)
    spec = next(s for s in load_specs() if s.name == settings.planner_model)
    catalog = load_catalog()
    fleet = Fleet.default()
    trust = fc.Trust(fc.FALLBACK_BASELINE, False, "no champion yet")
    horizon = settings.planner_horizon_minutes
    wednesday = 1_764_720_000  # 2025-12-03 00:00 UTC
    unchanged = {}
    for hour in range(24):
        now = wednesday + hour * 3600
        samples = np.arange(now - fc.history_hours(spec) * 3600, now, spec.step_s)
        forecasts = fc.forecasts_from(
            gpu_samples(fleet, samples), demand(fleet, samples), spec, trust, horizon
        )
        cluster = SimulatedCluster.open(tmp_path / f"{hour}.json", fleet=fleet, clock=partial(float, now))
        observed = [NodeObservation(n, tuple(cluster.list_gpu_pods(n.name))) for n in cluster.list_nodes()]
        plan = plan_fleet(observed, forecasts, catalog, config, datetime.fromtimestamp(now, UTC))
        if not any(p.action == CHANGE for p in plan.nodes):
            unchanged[hour] = [f"{p.node}: {p.action}, {p.reasons[-1]}" for p in plan.nodes]
    assert not unchanged, unchanged
