"""Helper columns the suite validates but the partition does not store: device capacity, per-series statistics.

Pure pandas, no Great Expectations: each function promises a frame the suite can put plain column
expectations on, so every rule stays a GX expectation with its result in the validation JSON and Data Docs.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from slicewise import schema

if TYPE_CHECKING:
    import pandas as pd

#: Columns added to the GPU sample frame for the samples suite.
CAPACITY = "fb_capacity_mib"
ROW_LABEL = "row"
#: Columns of the per-series frame (one row per GPU series now or in the previous hour).
SERIES = "series"
SAMPLES = "samples"
COMPLETENESS = "completeness"
STALENESS_S = "staleness_s"
IN_PREVIOUS = "in_previous_hour"
PRESENT = "present_now"


@dataclass(frozen=True)
class DeviceMemory:
    """Framebuffer size by DCGM ``modelName``: the whole GPU, and each MIG profile by name."""

    whole_mib: Mapping[str, float]
    profile_mib: Mapping[tuple[str, str], float]


@functools.cache
def device_memory(path: Path | None = None) -> DeviceMemory:
    """Memory per model and MIG profile from ``gpu_models.yaml`` (the shipped one by default)."""
    from slicewise.settings import CONFIG_DIR

    raw: dict[str, Any] = yaml.safe_load((path or CONFIG_DIR / "gpu_models.yaml").read_text())
    whole: dict[str, float] = {}
    profiles: dict[tuple[str, str], float] = {}
    for model in raw.get("models", {}).values():
        name = model["dcgm_model_name"]
        whole[name] = float(model["memory_mib"])
        for profile, spec in (model.get("profiles") or {}).items():
            profiles[(name, profile)] = float(spec["memory_mib"])
    return DeviceMemory(whole, profiles)


def capacity_mib(frame: pd.DataFrame, memory: DeviceMemory) -> pd.Series:
    """Framebuffer of the device each row measures: the model's memory for a whole GPU, the profile's for a
    MIG instance, and ``used + free`` when the model or profile is unknown (so an unknown GPU never fails)."""
    import pandas as pd

    model = frame["model_name"].astype("string").fillna("")
    profile = frame["mig_profile"].astype("string").fillna("")
    whole = model.map(memory.whole_mib)
    per_profile = pd.Series(list(zip(model, profile, strict=True)), index=frame.index).map(memory.profile_mib)
    known = whole.where(profile == "", per_profile).astype("float64")
    reported = frame["fb_used_mib"] + frame["fb_free_mib"]
    return known.fillna(reported)


def series_label(frame: pd.DataFrame) -> pd.Series:
    """``node-a gpu 2`` for a whole GPU, ``node-a gpu 2 mig 7`` for a MIG instance: what on-call searches for."""
    instance = frame["gpu_instance_id"].astype("string").fillna("")
    base = frame["hostname"].astype("string").fillna("?") + " gpu " + frame["gpu"].astype("string")
    return base.where(instance == "", base + " mig " + instance)


def with_sample_columns(frame: pd.DataFrame, memory: DeviceMemory, *, columns: set[str]) -> pd.DataFrame:
    """A copy of the GPU frame with a 0..n-1 index (GX reports unexpected rows by index), the device capacity
    when the memory columns are usable, and a readable row label for failure examples."""
    out = frame.reset_index(drop=True)
    if {"model_name", "mig_profile", "fb_used_mib", "fb_free_mib"} <= columns:
        out[CAPACITY] = capacity_mib(out, memory)
    if {"hostname", "gpu", "gpu_instance_id"} <= columns:
        out[ROW_LABEL] = series_label(out)
    return out


def series_frame(
    frame: pd.DataFrame,
    *,
    interval_start: datetime,
    interval_end: datetime,
    step_s: int,
    previous_keys: pd.DataFrame | None,
) -> pd.DataFrame:
    """One row per GPU series present now or in the previous hour, with its sample count, completeness
    (distinct timestamps inside the interval / expected samples), staleness (seconds from its newest sample to
    the interval's end) and whether it is present now / was present in the previous hour.

    Completeness and staleness are NaN for a series that vanished: GX skips missing values, so a vanished GPU
    is reported once, by the vanished check, not three times.
    """
    import pandas as pd

    key = list(schema.GPU_KEY)
    start, end = pd.Timestamp(interval_start), pd.Timestamp(interval_end)
    expected = max((end - start).total_seconds() / step_s, 1.0)
    stamps = frame[schema.TIMESTAMP]
    inside = frame.loc[(stamps >= start) & (stamps < end)]
    current = _normalised_keys(frame)
    grouped = inside.groupby(_normalised_keys(inside).columns.tolist(), dropna=False)
    per_series = current.drop_duplicates().merge(
        pd.DataFrame(
            {
                SAMPLES: _normalised_keys(inside).groupby(key, dropna=False).size(),
            }
        ).reset_index(),
        on=key,
        how="left",
    )
    del grouped
    newest = frame.assign(**_normalised_keys(frame)).groupby(key, dropna=False)[schema.TIMESTAMP].max()
    distinct = (
        inside.assign(**_normalised_keys(inside)).groupby(key, dropna=False)[schema.TIMESTAMP].nunique()
    )
    per_series = current.drop_duplicates().reset_index(drop=True)
    per_series[SAMPLES] = _lookup(per_series, distinct).fillna(0).astype("int64")
    per_series[COMPLETENESS] = per_series[SAMPLES] / expected
    per_series[STALENESS_S] = (end - _lookup(per_series, newest)).dt.total_seconds()
    per_series[PRESENT] = True
    if previous_keys is not None:
        previous = _normalised_keys(previous_keys).drop_duplicates()
        per_series = per_series.merge(previous.assign(**{IN_PREVIOUS: True}), on=key, how="outer")
        per_series[PRESENT] = per_series[PRESENT].fillna(False).astype(bool)
        per_series[IN_PREVIOUS] = per_series[IN_PREVIOUS].fillna(False).astype(bool)
    else:
        per_series[IN_PREVIOUS] = False
    per_series[SERIES] = series_label(per_series)
    return per_series.sort_values(key, ignore_index=True)
