"""The load model: every GPU reading as a pure, vectorised function of (fleet seed, slot, unix second).

Time enters only through counters (the pod epoch, the busy block, the DCGM sample period), and noise is a hash
of (slot key, counter, stream): computing one timestamp or a week of them gives the same value for the same
second. Arrays are ``(T, S)`` for T timestamps and S slots (or R series, P physical GPUs).

Shape of a slot's load: a pod runs in an epoch (``lifetime_s``) with probability *demand*, which follows the
class's working-day cycle; a running pod is busy block by block with a probability that follows the same
cycle; while busy its engine activity is logit-normal around the class median. Bursts and idle stretches come
from the busy blocks, the idle epochs and the nights and weekends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from slicewise.simulator import noise
from slicewise.simulator.layout import KIND_MIG, KIND_MPS

if TYPE_CHECKING:
    from slicewise.simulator.fleet import Fleet

DAY_S = 86_400
WEEK_S = 7 * DAY_S
_MONDAY_OFFSET_DAYS = 3  # 1970-01-01 was a Thursday

# Noise streams: one constant per independent random quantity, so quantities never share random numbers.
_PRESENT, _STALL, _POD_LEVEL, _BUSY, _SAMPLE, _DRAM, _MEM, _MEM_JITTER = range(101, 109)
_UTIL, _POWER, _RX, _TX, _RX_IDLE = range(201, 206)


@dataclass(frozen=True)
class LoadClass:
    """Parameters of one workload class (see ``include/config/simulator.yaml`` for their meaning)."""

    name: str
    lifetime_s: int
    mean_demand: float
    demand_swing: float
    night_level: float
    weekend_level: float
    busy_share: float
    busy_swing: float
    busy_block_s: int
    level_median: float
    pod_sigma: float
    sample_sigma: float
    level_swing: float
    stalled_share: float
    dram_ratio: float
    mem_share: tuple[float, float]

    @classmethod
    def from_mapping(cls, name: str, raw: Mapping[str, Any]) -> LoadClass:
        """Parse and check one ``classes:`` entry; raises ValueError naming the bad parameter."""
        names = [f.name for f in fields(cls) if f.name not in ("name", "mem_share")]
        missing = [n for n in [*names, "mem_share"] if n not in raw]
        if missing:
            raise ValueError(f"class {name}: missing parameter(s) {', '.join(missing)}")
        values: dict[str, Any] = {n: float(raw[n]) for n in names}
        for n in ("lifetime_s", "busy_block_s"):
            values[n] = int(raw[n])
            if values[n] <= 0:
                raise ValueError(f"class {name}: {n} must be positive")
        lo, hi = (float(x) for x in raw["mem_share"])
        for n in ("night_level", "weekend_level", "busy_share", "stalled_share"):
            if not 0.0 <= values[n] <= 1.0:
                raise ValueError(f"class {name}: {n}={values[n]} must be in [0, 1]")
        if values["mean_demand"] < 0.0:  # above 1 is allowed: more pods than slots on average
            raise ValueError(f"class {name}: mean_demand must not be negative")
        if not 0.0 < values["level_median"] < 1.0 or not 0.0 <= lo <= hi < 1.0:
            raise ValueError(f"class {name}: level_median must be in (0, 1) and 0 <= mem_share lo <= hi < 1")
        return cls(name=name, mem_share=(lo, hi), **values)


@dataclass(frozen=True)
class CycleParams:
    peak_hour_utc: float
    sharpness: float

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> CycleParams:
        return cls(float(raw["peak_hour_utc"]), float(raw["sharpness"]))


@dataclass(frozen=True)
class DeviceParams:
    idle_power_share: float
    power_exponent: float
    power_noise: float
    util_noise_pct: float
    pcie_rx_peak_bytes_per_s: float
    pcie_tx_ratio: float
    pcie_idle_bytes_per_s: float
    idle_fb_mib: float

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> DeviceParams:
        return cls(**{f.name: float(raw[f.name]) for f in fields(cls)})


def raw_activity(t: np.ndarray, night: ArrayLike, weekend: ArrayLike, cycle: CycleParams) -> np.ndarray:
    """Working-day activity in [night, 1]: a raised-cosine bump around the peak hour, lower at weekends."""
    t = np.asarray(t)
    night = np.asarray(night, dtype=np.float64)
    hours = (t % DAY_S) / 3600.0
    bump = (0.5 + 0.5 * np.cos(2.0 * np.pi * (hours - cycle.peak_hour_utc) / 24.0)) ** cycle.sharpness
    weekday = (t // DAY_S + _MONDAY_OFFSET_DAYS) % 7
    scale = np.where(weekday >= 5, weekend, 1.0)
    return np.asarray(night + (1.0 - night) * bump * scale)


@lru_cache(maxsize=256)
def _weekly_mean(night: float, weekend: float, cycle: CycleParams) -> float:
    grid = np.arange(0, WEEK_S, 60, dtype=np.int64)
    return float(raw_activity(grid, np.float64(night), np.float64(weekend), cycle).mean())


def activity(
    t: np.ndarray, classes: list[LoadClass], class_index: np.ndarray, cycle: CycleParams
) -> np.ndarray:
    """Activity relative to its weekly mean (so 1.0 on average over any whole week), per slot class.

    ``t`` broadcasts against ``class_index`` (one class per slot column).
    """
    night = np.array([c.night_level for c in classes])[class_index]
    weekend = np.array([c.weekend_level for c in classes])[class_index]
    means = np.array([_weekly_mean(c.night_level, c.weekend_level, cycle) for c in classes])[class_index]
    return raw_activity(t, night, weekend, cycle) / means


def demand_level(mean_demand: ArrayLike, swing: ArrayLike, act: np.ndarray) -> np.ndarray:
    """Expected pods per slot: the mean demand, moved by ``swing`` times the relative activity."""
    return np.asarray(mean_demand, dtype=np.float64) * (
        1.0 + np.asarray(swing, dtype=np.float64) * (act - 1.0)
    )


@dataclass(frozen=True)
class SlotLoad:
    """Per-slot state at each timestamp: ``(T, S)`` arrays."""

    epoch: np.ndarray  # pod lifetime window number
    present: np.ndarray  # a pod runs in the slot
    engine: np.ndarray  # GR_ENGINE_ACTIVE ratio, 0 when idle
    dram: np.ndarray  # DRAM_ACTIVE ratio
    fb_used_mib: np.ndarray  # memory the pod holds (0 when no pod)


@dataclass(frozen=True)
class SeriesLoad:
    """Readings of each dcgm series ``(T, R)`` and physical GPU ``(T, P)``, plus the slot state."""

    slots: SlotLoad
    engine: np.ndarray
    dram: np.ndarray
    gpu_util: np.ndarray  # NaN on MIG instances
    fb_used_mib: np.ndarray
    fb_free_mib: np.ndarray
    power_w: np.ndarray  # (T, P)
    pcie_tx: np.ndarray  # (T, P)
    pcie_rx: np.ndarray  # (T, P)


def as_timestamps(timestamps: Any) -> np.ndarray:
    """Unix seconds as a 1-D int64 array; raises ValueError for non-integral or non-1-D input."""
    raw = np.asarray(timestamps)
    if raw.ndim != 1:
        raise ValueError(f"timestamps must be one-dimensional, got shape {raw.shape}")
    out = raw.astype(np.int64)
    if raw.dtype.kind == "f" and not np.array_equal(out, raw):
        raise ValueError("timestamps must be whole unix seconds")
    return out


def _per_class(fleet: Fleet, attr: str) -> np.ndarray:
    values = [getattr(fleet.classes[name], attr) for name in fleet.class_names]
    return np.asarray(values)[fleet.layout.slot_class]


def slot_load(fleet: Fleet, timestamps: Any) -> SlotLoad:
    """The state of every slot of ``fleet`` at each of ``timestamps`` (unix seconds)."""
    layout = fleet.layout
    classes = [fleet.classes[name] for name in fleet.class_names]
    t = as_timestamps(timestamps)[:, None]
    key = layout.slot_key[None, :]
    cls = layout.slot_class

    lifetime = _per_class(fleet, "lifetime_s").astype(np.int64)
    offset = key % lifetime  # slots change pods at different times of day
    epoch = (t + offset) // lifetime
    act_epoch = activity(epoch * lifetime - offset, classes, cls, fleet.cycle)
    demand = demand_level(_per_class(fleet, "mean_demand"), _per_class(fleet, "demand_swing"), act_epoch)
    present = noise.uniform(key, _PRESENT, epoch) < demand
    stalled = noise.uniform(key, _STALL, epoch) < _per_class(fleet, "stalled_share")

    act = activity(t, classes, cls, fleet.cycle)
    block_s = _per_class(fleet, "busy_block_s").astype(np.int64)
    block = (t + (key >> 20) % block_s) // block_s
    p_busy = np.clip(
        _per_class(fleet, "busy_share") * (1.0 + _per_class(fleet, "busy_swing") * (act - 1.0)), 0, 1
    )
    busy = noise.uniform(key, _BUSY, block) < p_busy

    sample = t // fleet.sample_period_s
    median = _per_class(fleet, "level_median")
    logit = (
        np.log(median / (1.0 - median))
        + _per_class(fleet, "pod_sigma") * noise.normal(key, _POD_LEVEL, epoch)
        + _per_class(fleet, "level_swing") * (act - 1.0)
        + _per_class(fleet, "sample_sigma") * noise.normal(key, _SAMPLE, sample)
    )
    level = np.clip(np.round(1.0 / (1.0 + np.exp(-logit)), 4), 0.01, 1.0)  # DCGM reports ratios to ~1e-4
    running = present & ~stalled & busy
    engine = np.where(running, level, 0.0)
    dram_jitter = np.exp(0.15 * noise.normal(key, _DRAM, sample))
    dram = np.where(
        running, np.clip(np.round(engine * _per_class(fleet, "dram_ratio") * dram_jitter, 4), 0, 1), 0
    )

    lo = np.array([c.mem_share[0] for c in classes])[cls]
    hi = np.array([c.mem_share[1] for c in classes])[cls]
    share = lo + (hi - lo) * noise.uniform(key, _MEM, epoch)
    # Memory is held for the pod's life (also while idle or stalled), with a little growth under load.
    grow = 1.0 + 0.05 * engine + 0.01 * noise.normal(key, _MEM_JITTER, sample)
    capacity = layout.slot_capacity_mib[None, :]
    used = np.clip(np.round(capacity * share * grow), 1.0, np.floor(capacity * 0.99))
    return SlotLoad(
        epoch=epoch,
        present=present,
        engine=engine,
        dram=dram,
        fb_used_mib=np.where(present, used, 0.0),
    )


def series_load(fleet: Fleet, timestamps: Any) -> SeriesLoad:
    """dcgm readings of every series and physical GPU of ``fleet`` at each of ``timestamps``."""
    layout = fleet.layout
    dev = fleet.device
    t = as_timestamps(timestamps)[:, None]
    slots = slot_load(fleet, t[:, 0])
    starts = layout.series_slot_start
    kind = layout.series_kind[None, :]

    def per_series(values: np.ndarray) -> np.ndarray:
        # An MPS GPU sums its tenants; whole GPUs and MIG instances hold a single slot each.
        return np.asarray(np.add.reduceat(values, starts, axis=1))

    engine = np.minimum(per_series(slots.engine), 1.0)
    dram = np.minimum(per_series(slots.dram), 1.0)
    n_present = per_series(slots.present.astype(np.int64))
    capacity = layout.series_capacity_mib[None, :]
    idle_fb = np.where((kind == KIND_MPS) | (n_present == 0), dev.idle_fb_mib, 0.0)
    fb_used = np.minimum(per_series(slots.fb_used_mib) + idle_fb, capacity)

    sample = t // fleet.sample_period_s
    series_key = layout.slot_key[starts][None, :]
    util = np.clip(
        np.round(100.0 * engine + dev.util_noise_pct * noise.normal(series_key, _UTIL, sample)), 1, 100
    )
    gpu_util = np.where(kind == KIND_MIG, np.nan, np.where(engine > 0, util, 0.0))

    # Power and PCIe belong to the physical GPU: its activity is the compute-weighted sum of its series.
    weighted = engine * layout.series_weight[None, :]
    phys_act = np.minimum(np.add.reduceat(weighted, layout.phys_series_start, axis=1), 1.0)
    pkey = layout.phys_key[None, :]
    tdp = layout.phys_tdp_w[None, :]
    idle_w = dev.idle_power_share * tdp
    raw_power = (idle_w + (tdp - idle_w) * phys_act**dev.power_exponent) * (
        1.0 + dev.power_noise * noise.normal(pkey, _POWER, sample)
    )
    power = np.round(np.clip(raw_power, idle_w, tdp), 1)
    rx = dev.pcie_idle_bytes_per_s * (1.0 + noise.uniform(pkey, _RX_IDLE, sample)) + (
        phys_act * dev.pcie_rx_peak_bytes_per_s * np.exp(0.3 * noise.normal(pkey, _RX, sample))
    )
    tx = rx * dev.pcie_tx_ratio * np.exp(0.2 * noise.normal(pkey, _TX, sample))
    return SeriesLoad(
        slots=slots,
        engine=np.round(engine, 4),
        dram=np.round(dram, 4),
        gpu_util=gpu_util,
        fb_used_mib=fb_used,
        fb_free_mib=capacity - fb_used,
        power_w=power,
        pcie_tx=np.round(tx),
        pcie_rx=np.round(rx),
    )
