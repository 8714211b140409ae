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


def with_capacity(frame: pd.DataFrame, memory: DeviceMemory) -> pd.DataFrame:
    """A copy of the GPU frame with a 0..n-1 index (GX reports unexpected rows by index) and the capacity of
    the device each row measures, for the "used <= capacity" expectation."""
    out = frame.reset_index(drop=True)
    out[CAPACITY] = capacity_mib(out, memory)
    return out


def sample_labels(frame: pd.DataFrame) -> list[str]:
    """``node-a gpu 2 at 10:05:00`` per row: what a failure line names as an example."""
    when = frame[schema.TIMESTAMP].dt.strftime("%H:%M:%S").astype("string").fillna("?")
    return (series_label(frame) + " at " + when).tolist()


def series_frame(
    frame: pd.DataFrame,
    *,
    interval_start: datetime,
    interval_end: datetime,
    step_s: int,
    previous_keys: pd.DataFrame | None,
) -> pd.DataFrame:
    """One row per GPU series present now or in the previous hour, with its sample count, completeness
    (distinct timestamps inside the interval / expected samples), staleness (seconds from its newest sample
    inside the interval to the interval's end) and whether it is present now / was present an hour before.

    Rows whose series cannot be identified (no hostname, no gpu number) are left out: the label checks report
    them, and counting them here would invent a one-sample series that also fails completeness. Completeness
    and staleness are NaN for a series that vanished: GX skips missing values, so a vanished GPU is reported
    once, by the vanished check.
    """
    import pandas as pd

    key = list(schema.GPU_KEY)
    start, end = pd.Timestamp(interval_start), pd.Timestamp(interval_end)
    expected = max((end - start) / pd.Timedelta(seconds=step_s), 1.0)
    keyed = normalised_keys(frame)
    keyed[schema.TIMESTAMP] = frame[schema.TIMESTAMP]
    keyed = keyed.loc[(keyed["hostname"] != "") & (keyed["gpu"] >= 0)]
    stamps = keyed[schema.TIMESTAMP]
    inside = keyed.loc[(stamps >= start) & (stamps < end)].groupby(key, dropna=False)[schema.TIMESTAMP]
    per_series = keyed[key].drop_duplicates().set_index(key)
    # Distinct timestamps, so duplicated rows (reported by their own check) cannot make up for gaps.
    per_series[SAMPLES] = inside.nunique()
    per_series["newest"] = inside.max()
    per_series = per_series.reset_index()
    per_series[SAMPLES] = per_series[SAMPLES].fillna(0).astype("int64")
    per_series[COMPLETENESS] = per_series[SAMPLES] / expected
    # to_datetime: on an empty frame the column comes back as object dtype.
    per_series[STALENESS_S] = (end - pd.to_datetime(per_series.pop("newest"), utc=True)).dt.total_seconds()
    per_series[PRESENT] = True
    per_series[IN_PREVIOUS] = False
    if previous_keys is not None:
        previous = normalised_keys(previous_keys).drop_duplicates()
        previous[IN_PREVIOUS] = True
        per_series = per_series.drop(columns=[IN_PREVIOUS]).merge(previous, on=key, how="outer")
        per_series[PRESENT] = per_series[PRESENT].astype("boolean").fillna(False).astype(bool)
        per_series[IN_PREVIOUS] = per_series[IN_PREVIOUS].astype("boolean").fillna(False).astype(bool)
    per_series[SERIES] = series_label(per_series)
    return per_series.sort_values(key, ignore_index=True)


def normalised_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """The series key columns with one dtype each (string, int64, string), so the current and the previous
    partition join even if one of them was written with a different dtype; a missing label becomes ""."""
    import pandas as pd

    return pd.DataFrame(
        {
            "hostname": frame["hostname"].astype("string").fillna(""),
            "gpu": pd.to_numeric(frame["gpu"], errors="coerce").fillna(-1).astype("int64"),
            "gpu_instance_id": frame["gpu_instance_id"].astype("string").fillna(""),
        },
        index=frame.index,
    )
