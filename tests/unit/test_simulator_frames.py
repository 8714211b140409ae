"""The simulator's schema frames: what a Prometheus read of the simulated fleet must give back."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from slicewise import schema
from slicewise.catalog import load_catalog
from slicewise.simulator import demand, gpu_samples
from slicewise.simulator.fleet import Fleet

MONDAY = 1_704_672_000  # 2024-01-08 00:00 UTC
HOUR = 3600


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet.default()


@pytest.fixture(scope="module")
def day_gpu(fleet: Fleet) -> pd.DataFrame:
    return gpu_samples(fleet, np.arange(MONDAY, MONDAY + 24 * HOUR, 300))


@pytest.fixture(scope="module")
def day_demand(fleet: Fleet) -> pd.DataFrame:
    return demand(fleet, np.arange(MONDAY, MONDAY + 24 * HOUR, 300))


def test_gpu_frame_follows_the_schema_contract(day_gpu: pd.DataFrame) -> None:
    assert tuple(day_gpu.columns) == schema.GPU_COLUMNS
    assert day_gpu.dtypes.astype(str).to_dict() == schema.GPU_DTYPES
    # one row per (series, timestamp), sorted like the Prometheus reader sorts
    assert not day_gpu.duplicated([*schema.GPU_KEY, schema.TIMESTAMP]).any()
    resorted = day_gpu.sort_values([*schema.GPU_KEY, schema.TIMESTAMP], ignore_index=True)
    pd.testing.assert_frame_equal(resorted, day_gpu)


def test_every_series_appears_at_every_timestamp(fleet: Fleet, day_gpu: pd.DataFrame) -> None:
    per_ts = day_gpu.groupby(schema.TIMESTAMP).size()
    assert len(per_ts) == 24 * 12
    assert (per_ts == fleet.layout.n_series).all()


def test_mig_rows_have_no_gpu_util_and_share_device_readings(day_gpu: pd.DataFrame) -> None:
    mig = day_gpu["mig_profile"] != ""
    assert mig.any() and (~mig).any()
    assert day_gpu.loc[mig, "gpu_util"].isna().all()
    assert day_gpu.loc[~mig, "gpu_util"].notna().all()
    # power and PCIe are the physical GPU's: identical on all instances of one GPU at one instant
    device = ["power_w", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"]
    spread = day_gpu[mig].groupby(["hostname", "gpu", schema.TIMESTAMP])[device].nunique()
    assert (spread == 1).all().all()


def test_memory_adds_up_to_the_device_or_instance_size(day_gpu: pd.DataFrame) -> None:
    models = {m.dcgm_model_name: m for m in load_catalog().models.values()}
    total = day_gpu["fb_used_mib"] + day_gpu["fb_free_mib"]
    expected = [
        models[name].profiles[profile].memory_mib if profile else models[name].memory_mib
        for name, profile in zip(day_gpu["model_name"], day_gpu["mig_profile"], strict=True)
    ]
    assert (total == np.asarray(expected, dtype=float)).all()


def test_pod_labels_come_and_go_together_and_never_on_mps_gpus(fleet: Fleet, day_gpu: pd.DataFrame) -> None:
    has_pod = day_gpu["pod"] != ""
    assert ((day_gpu["namespace"] != "") == has_pod).all()
    assert ((day_gpu["container"] != "") == has_pod).all()
    assert has_pod.mean() > 0.3 and (~has_pod).any()  # mostly attributed, some idle slots
    mps_hosts = {node.name for node in fleet.nodes if node.sharing == "mps"}
    assert not day_gpu.loc[day_gpu["hostname"].isin(mps_hosts), "pod"].ne("").any()
    # idle slots do nothing
    idle = day_gpu[~has_pod & ~day_gpu["hostname"].isin(mps_hosts)]
    assert (idle["engine_active"] == 0).all()


def test_pod_names_are_workload_plus_five_hex_in_the_workloads_namespace(
    fleet: Fleet, day_gpu: pd.DataFrame
) -> None:
    pods = day_gpu.loc[day_gpu["pod"] != "", ["namespace", "pod", "container"]].drop_duplicates()
    for namespace, pod, container in pods.itertuples(index=False):
        match = re.fullmatch(r"(?P<workload>[a-z-]+)-[0-9a-f]{5}", pod)
        assert match, pod
        workload = fleet.workloads[match["workload"]]
        assert (workload.namespace, workload.container) == (namespace, container)


def test_demand_frame_follows_the_schema_contract(day_demand: pd.DataFrame) -> None:
    assert tuple(day_demand.columns) == schema.DEMAND_COLUMNS
    assert day_demand.dtypes.astype(str).to_dict() == schema.DEMAND_DTYPES
    assert (day_demand["requested"] == 1.0).all()
    assert day_demand["resource"].str.fullmatch(schema.GPU_RESOURCE_REGEX).all()


def test_pending_pods_have_no_node_and_running_pods_fit_their_node(
    fleet: Fleet, day_demand: pd.DataFrame
) -> None:
    pending = day_demand["unschedulable"]
    assert (day_demand.loc[pending, "node"] == "").all()
    assert (day_demand.loc[~pending, "node"] != "").all()
    running = day_demand[~pending].groupby([schema.TIMESTAMP, "node", "resource"]).size()
    capacity = fleet.node_capacity()
    for node, resource, count in running.reset_index(name="n")[["node", "resource", "n"]].itertuples(
        index=False
    ):
        assert count <= capacity[(node, resource)]
    # no two pods of one namespace share a name at one instant
    assert not day_demand.duplicated([schema.TIMESTAMP, "namespace", "pod"]).any()


def test_demand_exceeds_the_slots_at_peak_hours_and_not_at_night(
    fleet: Fleet, day_demand: pd.DataFrame
) -> None:
    # given the pods asking for a GPU at each instant (running and pending)
    asked = day_demand.groupby(schema.TIMESTAMP).size()
    pending = day_demand[day_demand["unschedulable"]].groupby(schema.TIMESTAMP).size()
    hours = pd.DatetimeIndex(asked.index).hour

    # then at peak hours more pods ask than the fleet has slots, and nothing waits at night
    assert asked[hours.isin(range(12, 17))].max() > fleet.layout.n_slots
    assert pending.reindex(asked.index, fill_value=0)[hours.isin(range(12, 17))].mean() >= 3
    assert pending.reindex(asked.index, fill_value=0)[hours.isin(range(0, 5))].sum() == 0


def test_attributed_gpu_pods_are_running_pods_of_the_demand_frame(
    day_gpu: pd.DataFrame, day_demand: pd.DataFrame
) -> None:
    gpu_pods = day_gpu.loc[day_gpu["pod"] != "", [schema.TIMESTAMP, "namespace", "pod", "hostname"]]
    running = day_demand.loc[~day_demand["unschedulable"], [schema.TIMESTAMP, "namespace", "pod", "node"]]
    joined = gpu_pods.merge(running, on=[schema.TIMESTAMP, "namespace", "pod"], how="left")
    assert (joined["node"] == joined["hostname"]).all()


def test_frames_of_one_instant_do_not_depend_on_the_other_instants(fleet: Fleet) -> None:
    wide = gpu_samples(fleet, np.arange(MONDAY, MONDAY + 2 * HOUR, 60))
    one = gpu_samples(fleet, [MONDAY + HOUR])
    picked = wide[wide[schema.TIMESTAMP] == pd.Timestamp(MONDAY + HOUR, unit="s", tz="UTC")]
    pd.testing.assert_frame_equal(picked.reset_index(drop=True), one)
    d_wide = demand(fleet, np.arange(MONDAY + 12 * HOUR, MONDAY + 13 * HOUR, 60))
    d_one = demand(fleet, [MONDAY + 12 * HOUR + 600])
    picked_d = d_wide[d_wide[schema.TIMESTAMP] == pd.Timestamp(MONDAY + 12 * HOUR + 600, unit="s", tz="UTC")]
    pd.testing.assert_frame_equal(picked_d.reset_index(drop=True), d_one)
