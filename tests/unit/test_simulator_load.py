"""The load model: a pure function of (seed, slot, second) with the daily and weekly shape it promises."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from slicewise.simulator import noise
from slicewise.simulator.fleet import Fleet, load_config
from slicewise.simulator.layout import KIND_MIG, KIND_MPS
from slicewise.simulator.load import as_timestamps, series_load, slot_load

#: Monday 2024-01-08 00:00 UTC
MONDAY = 1_704_672_000
HOUR = 3600
DAY = 86_400


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet.default()


def _single_class_fleet(workload: str, gpus: int = 64, **node: Any) -> Fleet:
    config = copy.deepcopy(load_config())
    config["nodes"] = [
        {"name": f"n{i}", "model": "H100-80GB", "gpus": 8, "workloads": [workload], **node}
        for i in range(gpus // 8)
    ]
    return Fleet.from_config(config)


def test_splitmix_hash_is_deterministic_and_uniform() -> None:
    # given a counter range
    counters = np.arange(200_000)

    # when hashed twice
    u1, u2 = noise.uniform(42, counters), noise.uniform(42, counters)

    # then the same numbers come back, spread evenly over [0, 1), and another key gives other numbers
    assert np.array_equal(u1, u2)
    assert u1.min() >= 0.0 and u1.max() < 1.0
    assert np.histogram(u1, bins=10, range=(0, 1))[0] == pytest.approx(np.full(10, 20_000), rel=0.05)
    assert np.mean(u1 == noise.uniform(43, counters)) < 1e-3


def test_scramble_is_a_bijection() -> None:
    values = np.arange(2**16)
    assert len(np.unique(noise.scramble(values, 16, salt=99))) == 2**16


def test_same_timestamp_gives_the_same_values_whatever_else_is_computed(fleet: Fleet) -> None:
    # given a day of timestamps and a few picked out of it, in another order
    day = np.arange(MONDAY, MONDAY + DAY, 60)
    picked = day[[900, 3, 700, 3]]

    # when both are computed
    full = series_load(fleet, day)
    part = series_load(fleet, picked)

    # then the picked rows are identical: no state carries from one timestamp to the next
    rows = [900, 3, 700, 3]
    for name in ("engine", "dram", "fb_used_mib", "power_w", "pcie_tx", "pcie_rx"):
        assert np.array_equal(getattr(full, name)[rows], getattr(part, name)), name
    assert np.array_equal(full.gpu_util[rows], part.gpu_util, equal_nan=True)


def test_values_stay_in_their_physical_ranges(fleet: Fleet) -> None:
    # given a week at 5-minute steps
    load = series_load(fleet, np.arange(MONDAY, MONDAY + 7 * DAY, 300))
    layout = fleet.layout

    # then ratios are in [0, 1], memory within the device, power between idle and TDP
    assert load.engine.min() >= 0 and load.engine.max() <= 1
    assert load.dram.min() >= 0 and load.dram.max() <= 1
    capacity = layout.series_capacity_mib[None, :]
    assert (load.fb_used_mib >= 0).all() and (load.fb_used_mib <= capacity).all()
    assert np.array_equal(
        load.fb_used_mib + load.fb_free_mib, np.broadcast_to(capacity, load.fb_used_mib.shape)
    )
    tdp = layout.phys_tdp_w[None, :]
    assert (load.power_w >= 0.15 * tdp - 1e-9).all() and (load.power_w <= tdp).all()
    assert (load.pcie_rx > 0).all() and (load.pcie_tx > 0).all()
    # and gpu_util exists only on whole / MPS GPUs, in 0..100, close to 100 x engine activity
    mig = layout.series_kind == KIND_MIG
    assert np.isnan(load.gpu_util[:, mig]).all()
    util = load.gpu_util[:, ~mig]
    assert not np.isnan(util).any() and util.min() >= 0 and util.max() <= 100
    assert np.abs(util - 100 * load.engine[:, ~mig]).mean() < 3.0
    assert ((util == 0) == (load.engine[:, ~mig] == 0)).all()


def test_power_follows_gpu_activity(fleet: Fleet) -> None:
    load = series_load(fleet, np.arange(MONDAY, MONDAY + 2 * DAY, 300))
    # engine activity of each physical GPU's first series vs its power (a monotone relation plus noise)
    first = fleet.layout.phys_series_start
    busy = load.engine[:, first] > 0.5
    idle = load.engine[:, first] == 0
    assert busy.any() and idle.any()
    share = load.power_w / fleet.layout.phys_tdp_w[None, :]
    assert share[busy].mean() > share[idle].mean() + 0.2


def test_an_mps_gpu_sums_its_tenants_clipped_to_one(fleet: Fleet) -> None:
    # given the MPS series and their tenant slots
    load = series_load(fleet, np.arange(MONDAY + 10 * HOUR, MONDAY + 16 * HOUR, 60))
    layout = fleet.layout
    for r in np.flatnonzero(layout.series_kind == KIND_MPS).tolist():
        tenants = load.slots.engine[:, layout.slot_series == r]
        # then the GPU's activity is the tenants' sum, at most 1
        assert np.allclose(load.engine[:, r], np.minimum(tenants.sum(axis=1), 1.0), atol=1e-4)


def test_idle_slots_have_no_activity_and_little_memory(fleet: Fleet) -> None:
    state = slot_load(fleet, np.arange(MONDAY, MONDAY + DAY, 60))
    assert (~state.present).any(), "some epochs must be idle"
    assert (state.engine[~state.present] == 0).all()
    assert (state.fb_used_mib[~state.present] == 0).all()


def test_working_hours_are_busier_than_nights_and_weekdays_than_weekends() -> None:
    # given a fleet of bursty inference pods over one week
    fleet = _single_class_fleet("vision-infer")
    ts = np.arange(MONDAY, MONDAY + 7 * DAY, 300)
    engine = series_load(fleet, ts).engine.mean(axis=1)
    hour = (ts % DAY) // HOUR
    weekday = ((ts - MONDAY) // DAY) < 5

    # then the working-hours mean exceeds the night mean, and weekdays exceed weekends
    peak = engine[weekday & (hour >= 12) & (hour < 17)].mean()
    night = engine[weekday & ((hour < 4) | (hour >= 23))].mean()
    assert peak > 2 * night
    assert engine[weekday].mean() > 1.3 * engine[~weekday].mean()


def test_pods_keep_their_slot_for_an_epoch_then_change() -> None:
    fleet = _single_class_fleet("vision-infer", gpus=8)
    state = slot_load(fleet, np.arange(MONDAY, MONDAY + 2 * DAY, 60))
    changes = np.diff(state.epoch, axis=0)
    lifetime_min = fleet.classes["inference-bursty"].lifetime_s // 60
    # then the epoch advances by at most one per minute and stays for the lifetime
    assert set(np.unique(changes).tolist()) == {0, 1}
    assert changes.sum(axis=0).max() <= 2 * DAY // 60 // lifetime_min + 1


def test_timestamps_must_be_whole_seconds_in_one_dimension() -> None:
    assert as_timestamps([1.0, 2.0]).dtype == np.int64
    with pytest.raises(ValueError, match="whole"):
        as_timestamps([1.5])
    with pytest.raises(ValueError, match="one-dimensional"):
        as_timestamps([[1, 2]])


def test_another_seed_gives_another_fleet_history() -> None:
    ts = np.arange(MONDAY, MONDAY + 6 * HOUR, 60)
    a = series_load(Fleet.synthetic(16, seed=1), ts).engine
    b = series_load(Fleet.synthetic(16, seed=2), ts).engine
    assert a.shape == b.shape and not np.array_equal(a, b)
