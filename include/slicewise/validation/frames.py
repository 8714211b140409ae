"""Validate the GPU sample frame and the demand frame of one interval.

Each frame goes through suites in order, all in one ephemeral GX context:

1. ``*_schema`` on the frame as given: exact columns, dtypes (and, for GPUs, not empty);
2. ``*_samples`` / ``demand_rows`` on the rows: only the checks whose columns passed step 1, so a missing or
   mistyped column is reported once, not once per check that reads it;
3. ``gpu_series`` on one row per GPU series (now or in the previous hour): completeness, staleness, vanished.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slicewise import schema
from slicewise.validation.report import ValidationReport, from_runs

if TYPE_CHECKING:
    import pandas as pd

    from slicewise.settings import Settings


def validate_gpu_frame(
    frame: pd.DataFrame,
    *,
    interval_start: datetime,
    interval_end: datetime,
    step_s: int,
    settings: Settings,
    previous_keys: pd.DataFrame | None = None,
) -> ValidationReport:
    """Validate a GPU sample frame for ``[interval_start, interval_end)`` sampled every ``step_s`` seconds.

    ``previous_keys``: the previous partition's distinct (hostname, gpu, gpu_instance_id), or None when there
    is no previous partition (then the vanished check is not part of the suite). Thresholds come from
    ``settings`` (min_completeness, max_staleness_s, max_vanished_share).
    """
    from slicewise.validation import checks, engine, suite

    start, end = _bounds(interval_start, interval_end)
    if step_s <= 0:
        raise ValueError(f"step_s must be positive, got {step_s}")
    if previous_keys is not None and not set(schema.GPU_KEY) <= set(previous_keys.columns):
        raise ValueError(f"previous_keys needs the columns {', '.join(schema.GPU_KEY)}")
    raw, runner, schema_run, usable = _check_schema(frame, start, "gpu_schema", suite.gpu_schema)
    sample_checks = suite.gpu_samples(start, end)
    samples = raw
    if {"model_name", "mig_profile", "fb_used_mib", "fb_free_mib"} <= usable:
        samples = checks.with_capacity(raw, checks.device_memory())
    labelled = {*schema.GPU_KEY, schema.TIMESTAMP} <= usable
    samples_run = runner.run(
        "gpu_samples",
        samples,
        sample_checks,
        usable=usable,
        labels=(lambda: checks.sample_labels(raw)) if labelled else None,
        result_format=engine.SAMPLE_RESULT_FORMAT,
    )
    runs = [schema_run, samples_run]
    series_count = 0
    series_checks = suite.gpu_series(settings, with_previous=previous_keys is not None)
    if labelled:
        per_series = checks.series_frame(
            raw, interval_start=start, interval_end=end, step_s=step_s, previous_keys=previous_keys
        )
        series_count = int(per_series[checks.PRESENT].sum())
        runs.append(
            runner.run(
                "gpu_series",
                per_series,
                series_checks,
                usable=usable,
                labels=lambda: per_series[checks.SERIES].tolist(),
                result_format=engine.SERIES_RESULT_FORMAT,
            )
        )
    return from_runs(
        _subject("GPU samples", start, end),
        runs,
        rows=len(raw),
        series=series_count,
        # Without key columns and timestamps the series suite cannot be built: its checks count as skipped.
        skipped=0 if labelled else len(series_checks),
    )


def validate_demand_frame(
    frame: pd.DataFrame, *, interval_start: datetime, interval_end: datetime
) -> ValidationReport:
    """Validate a kube-state-metrics demand frame for ``[interval_start, interval_end)``. An empty frame is
    valid (nobody asked for a GPU), a frame with the wrong columns is not."""
    from slicewise.validation import engine, suite

    start, end = _bounds(interval_start, interval_end)
    raw, runner, schema_run, usable = _check_schema(frame, start, "demand_schema", suite.demand_schema)
    key = [schema.TIMESTAMP, "namespace", "pod", "container", "resource"]
    labelled = set(key) <= usable
    rows_run = runner.run(
        "demand_rows",
        raw,
        suite.demand_rows(start, end),
        usable=usable,
        labels=(lambda: _demand_labels(raw)) if labelled else None,
        result_format=engine.SAMPLE_RESULT_FORMAT,
    )
    series = int(raw[key[1:]].drop_duplicates().shape[0]) if labelled else 0
    return from_runs(_subject("demand", start, end), [schema_run, rows_run], rows=len(raw), series=series)


def _demand_labels(frame: pd.DataFrame) -> Sequence[str]:
    when = frame[schema.TIMESTAMP].dt.strftime("%H:%M:%S").astype("string").fillna("?")
    name = frame["namespace"] + "/" + frame["pod"] + "/" + frame["container"] + " " + frame["resource"]
    return (name.astype("string").fillna("?") + " at " + when).tolist()


def _check_schema(
    frame: pd.DataFrame, start: pd.Timestamp, name: str, build: Callable[[list[str]], Any]
) -> tuple[pd.DataFrame, Any, Any, set[str]]:
    """Run the schema suite first; returns the frame, the runner, the run and the columns later suites may read."""
    from slicewise.validation import engine

    raw = frame.reset_index(drop=True)
    present = [str(column) for column in raw.columns]
    runner = engine.Runner(f"{start:%Y-%m-%dT%H%M}Z")
    schema_run = runner.run(
        name, raw, build(present), usable=present, labels=None, result_format=engine.SAMPLE_RESULT_FORMAT
    )
    return raw, runner, schema_run, engine.usable_columns(schema_run.result, present)


def _bounds(interval_start: datetime, interval_end: datetime) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The interval as UTC timestamps; a naive bound is a caller bug (which timezone?), not bad data."""
    import pandas as pd

    if interval_start.tzinfo is None or interval_end.tzinfo is None:
        raise ValueError("interval bounds must be timezone-aware (UTC)")
    start, end = pd.Timestamp(interval_start).tz_convert("UTC"), pd.Timestamp(interval_end).tz_convert("UTC")
    if end <= start:
        raise ValueError(f"empty interval: {start} .. {end}")
    return start, end


def _subject(kind: str, start: pd.Timestamp, end: pd.Timestamp) -> str:
    return f"{kind} {start:%Y-%m-%d %H:%M}-{end:%H:%M} UTC"
