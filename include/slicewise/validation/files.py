"""Validate a partition file as written by :func:`slicewise.store.write_frame` (for the CLI and ad-hoc checks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise import schema, store
from slicewise.validation.report import ValidationReport

if TYPE_CHECKING:
    import pandas as pd
    from airflow.sdk import ObjectStoragePath

    from slicewise.settings import Settings

KINDS = ("gpu", "demand")


class PartitionReadError(ValueError):
    """The input is not a partition at all (missing, unreadable, not Parquet, unknown kind, no interval).

    The message is one line meant for a person; a *readable* partition with bad data is not this error but a
    failing :class:`ValidationReport`.
    """


def validate_file(
    path: str | ObjectStoragePath,
    settings: Settings | None = None,
    *,
    previous: str | ObjectStoragePath | None = None,
) -> ValidationReport:
    """Read a GPU or demand partition file and validate it.

    The kind comes from the file's ``kind`` metadata, else from its columns; the interval from its
    ``interval_start`` / ``interval_end`` metadata, else from the data (the hours its timestamps fall in);
    ``step_s`` from its metadata, else ``settings``. ``previous``, a GPU partition of the hour before, adds the
    vanished-GPU check. Raises :class:`PartitionReadError` when there is nothing to validate.
    """
    from slicewise.validation.frames import validate_demand_frame, validate_gpu_frame

    if settings is None:
        from slicewise.settings import load_settings

        settings = load_settings()
    frame, meta = _read(path)
    kind = _kind(frame, meta, path)
    if frame.empty and not (meta.get("interval_start") and meta.get("interval_end")):
        # Readable but empty, and nothing says which hour it covers: invalid, not unreadable.
        why = "no rows and no interval in the file's metadata: nothing to validate, no hour it covers"
        stats = {"evaluated_expectations": 1, "successful_expectations": 0, "unsuccessful_expectations": 1}
        return ValidationReport(False, [why], {**stats, "rows": 0, "series": 0}, subject=f"{kind} {path}")
    start, end = _interval(frame, meta, path)
    if kind == "demand":
        return validate_demand_frame(frame, interval_start=start, interval_end=end)
    previous_keys = None
    if previous is not None:
        previous_frame, _ = _read(previous)
        missing = [column for column in schema.GPU_KEY if column not in previous_frame.columns]
        if missing:
            raise PartitionReadError(f"{previous}: not a GPU partition (no {', '.join(missing)} column)")
        previous_keys = previous_frame[list(schema.GPU_KEY)].drop_duplicates()
    step_s = _step(meta, settings.step_s, path)
    return validate_gpu_frame(
        frame,
        interval_start=start,
        interval_end=end,
        step_s=step_s,
        settings=settings,
        previous_keys=previous_keys,
    )


def _read(path: str | ObjectStoragePath) -> tuple[pd.DataFrame, dict[str, str]]:
    """``store.read_frame`` with every way a file can fail to be a table turned into one readable line."""
    import pyarrow as pa

    try:
        return store.read_frame(path)
    except FileNotFoundError:
        raise PartitionReadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PartitionReadError(f"{path}: is a folder, not a partition file") from None
    except PermissionError:
        raise PartitionReadError(f"{path}: permission denied") from None
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PartitionReadError(f"{path}: not a readable Parquet file ({first})") from None


def _kind(frame: pd.DataFrame, meta: dict[str, str], path: Any) -> str:
    declared = meta.get("kind")
    if declared:
        if declared not in KINDS:
            raise PartitionReadError(f"{path}: unknown partition kind {declared!r} (expected gpu or demand)")
        return declared
    columns = set(map(str, frame.columns))
    # Without metadata, the identifying columns decide; a few missing value columns are left for the
    # schema expectations to report.
    if set(schema.GPU_KEY) <= columns:
        return "gpu"
    if columns & {"resource", "requested", "unschedulable"}:
        return "demand"  # a missing demand column is then a schema failure (invalid), not an unreadable file
    shown = ", ".join(sorted(columns)[:8]) + (", ..." if len(columns) > 8 else "")
    raise PartitionReadError(f"{path}: neither a GPU nor a demand partition (columns: {shown or 'none'})")


def _interval(frame: pd.DataFrame, meta: dict[str, str], path: Any) -> tuple[datetime, datetime]:
    if meta.get("interval_start") and meta.get("interval_end"):
        start, end = _parse_time(meta["interval_start"], path), _parse_time(meta["interval_end"], path)
        if end <= start:
            raise PartitionReadError(f"{path}: empty interval in the metadata ({start} .. {end})")
        return start, end
    import pandas as pd

    stamps = frame[schema.TIMESTAMP] if schema.TIMESTAMP in frame.columns else None
    if stamps is None or not isinstance(stamps.dtype, pd.DatetimeTZDtype) or stamps.dropna().empty:
        raise PartitionReadError(
            f"{path}: no interval in the file's metadata and no UTC timestamps to infer it from"
        )
    # A partition holds one hour: the hour of its median sample (a sample exactly on the hour belongs to the
    # hour it starts); samples stamped in other hours then fail the interval check.
    hour = stamps.dropna().sort_values().iloc[len(stamps.dropna()) // 2].tz_convert("UTC").floor("h")
    return hour.to_pydatetime(), (hour + timedelta(hours=1)).to_pydatetime()


def _parse_time(text: str, path: Any) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise PartitionReadError(
            f"{path}: interval {text!r} in the metadata is not an ISO 8601 time"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _step(meta: dict[str, str], default: int, path: Any) -> int:
    text = meta.get("step_s")
    if not text:
        return default
    try:
        step = int(float(text))
    except ValueError:
        raise PartitionReadError(f"{path}: step_s {text!r} in the metadata is not a number") from None
    if step <= 0:
        raise PartitionReadError(f"{path}: step_s {step} in the metadata is not positive")
    return step
