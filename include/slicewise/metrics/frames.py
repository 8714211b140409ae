"""Turn Prometheus range-query results into the tidy frames of :mod:`slicewise.schema`.

Label dialects handled here, so nothing downstream sees them:
- node: ``Hostname`` (dcgm-exporter <= 4.5.3-4.8.2) or ``hostname`` (later);
- pod attribution: with ``honor_labels: false`` (the GPU Operator's ServiceMonitor default) Prometheus renames
  the exporter's ``pod``/``namespace``/``container`` to ``exported_*`` and sets ``pod`` to the exporter's own
  pod, so an ``exported_*`` label wins whenever present;
- GPU id: ``UUID`` or ``uuid`` (``--use-old-namespace``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise import schema

if TYPE_CHECKING:
    import pandas as pd

#: One series of a range query: ``{"metric": {label: value}, "values": [[unix_ts, "value"], ...]}``.
Series = Mapping[str, Any]


def _first(labels: Mapping[str, str], *names: str) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


def gpu_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Normalise one dcgm-exporter label set to the frame's label columns (all strings)."""
    return {
        "hostname": _first(labels, "Hostname", "hostname"),
        "gpu": labels.get("gpu", ""),
        "uuid": _first(labels, "UUID", "uuid"),
        "model_name": labels.get("modelName", ""),
        "mig_profile": labels.get("GPU_I_PROFILE", ""),
        "gpu_instance_id": labels.get("GPU_I_ID", ""),
        "namespace": _first(labels, "exported_namespace", "namespace"),
        "pod": _first(labels, "exported_pod", "pod"),
        "container": _first(labels, "exported_container", "container"),
    }


def demand_labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {
        "namespace": _first(labels, "exported_namespace", "namespace"),
        "pod": _first(labels, "exported_pod", "pod"),
        "container": _first(labels, "exported_container", "container"),
        "node": _first(labels, "exported_node", "node"),
        "resource": labels.get("resource", ""),
    }


def _points(item: Series) -> tuple[np.ndarray, np.ndarray] | None:
    points = item.get("values") or []
    if not points:
        return None
    raw = np.asarray(points, dtype=object)
    # Prometheus sends values as strings; "NaN" and "+Inf" parse as floats and are left for validation.
    return raw[:, 0].astype(np.float64), raw[:, 1].astype(np.float64)


def _to_utc(seconds: np.ndarray) -> pd.DatetimeIndex:
    import pandas as pd

    return pd.to_datetime(np.round(seconds * 1000).astype("int64"), unit="ms", utc=True)


def _long_frame(series: Iterable[Series], label_names: Sequence[str], shape: Any) -> pd.DataFrame:
    """Concatenate series into one long frame (labels..., timestamp, value)."""
    import pandas as pd

    columns: dict[str, list[str]] = {name: [] for name in label_names}
    timestamps: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for item in series:
        parsed = _points(item)
        if parsed is None:
            continue
        timestamps.append(parsed[0])
        values.append(parsed[1])
        labels = shape(item.get("metric", {}))
        for name in label_names:
            columns[name].extend([labels[name]] * len(parsed[0]))
    frame = pd.DataFrame({name: pd.array(col, dtype="string") for name, col in columns.items()})
    seconds = np.concatenate(timestamps) if timestamps else np.empty(0)
    frame[schema.TIMESTAMP] = _to_utc(seconds)
    frame["value"] = np.concatenate(values) if values else np.empty(0)
    return frame


class _SeriesIndex:
    """Gives every distinct label tuple an integer id, so pivoting groups on integers, not strings.

    Two series of the *same* metric whose labels normalise to the same tuple (e.g. the exporter scraped by two
    jobs) get different ids, so they surface as duplicate rows instead of being silently merged.
    """

    def __init__(self) -> None:
        self.ids: dict[tuple[tuple[str, ...], int], int] = {}
        self.labels: list[tuple[str, ...]] = []

    def assign(self, key: tuple[str, ...], seen_in_metric: dict[tuple[str, ...], int]) -> int:
        occurrence = seen_in_metric.get(key, 0)
        seen_in_metric[key] = occurrence + 1
        slot = (key, occurrence)
        if slot not in self.ids:
            self.ids[slot] = len(self.labels)
            self.labels.append(key)
        return self.ids[slot]


def _pivot(
    results: Mapping[str, Iterable[Series]], columns: Sequence[str], key_of: Any, index: _SeriesIndex
) -> pd.DataFrame:
    """Wide frame indexed by (series id, timestamp in ms) with one column per metric in ``columns``."""
    import pandas as pd

    ids: list[np.ndarray] = []
    stamps: list[np.ndarray] = []
    values: list[np.ndarray] = []
    fields: list[np.ndarray] = []
    for field_no, column in enumerate(columns):
        seen: dict[tuple[str, ...], int] = {}
        for item in results.get(column, ()):
            parsed = _points(item)
            if parsed is None:
                continue
            series_id = index.assign(key_of(item.get("metric", {})), seen)
            ids.append(np.full(len(parsed[0]), series_id, dtype=np.int64))
            stamps.append(np.round(parsed[0] * 1000).astype(np.int64))
            values.append(parsed[1])
            fields.append(np.full(len(parsed[0]), field_no, dtype=np.int64))
    if not ids:
        empty = pd.DataFrame(columns=list(columns), dtype="float64")
        empty.index = pd.MultiIndex.from_arrays([[], []], names=["series", "ms"])
        return empty
    long = pd.DataFrame(
        {
            "series": np.concatenate(ids),
            "ms": np.concatenate(stamps),
            "field": np.concatenate(fields),
            "value": np.concatenate(values),
        }
    )
    wide = long.groupby(["series", "ms", "field"], sort=False)["value"].last().unstack("field")
    wide.columns = [columns[int(c)] for c in wide.columns]
    return wide.reindex(columns=list(columns))


def drop_pod_handovers(wide: pd.DataFrame, gpu_key_of_series: np.ndarray, step_ms: int) -> pd.DataFrame:
    """Remove the outgoing pod's row where one step window saw two pods on the same GPU (or MIG instance).

    When a pod on a GPU is replaced, the step window ending at ``t`` can hold the old pod's last sample and the
    new pod's first, so the GPU appears twice at ``t``. That is one handover, not duplicate data: keep the series
    that carries on (present at ``t + step``; at the window's last step, the one that was not there at
    ``t - step``). Where no series can be told apart that way (the same GPU exported twice all along) every
    row stays, and validation reports the duplicates.
    """
    import pandas as pd

    if wide.empty:
        return wide
    key = pd.Series(gpu_key_of_series[wide["series"].to_numpy()], index=wide.index)
    clash = pd.DataFrame({"key": key, "ms": wide["ms"]}).duplicated(keep=False)
    if not clash.any():
        return wide
    present = pd.MultiIndex.from_arrays([wide["series"], wide["ms"]])
    has_next = pd.Series(
        present.isin(pd.MultiIndex.from_arrays([wide["series"], wide["ms"] - step_ms])), index=wide.index
    )
    has_prev = pd.Series(
        present.isin(pd.MultiIndex.from_arrays([wide["series"], wide["ms"] + step_ms])), index=wide.index
    )
    last_ms = wide["ms"].max()
    groups = pd.DataFrame({"key": key, "ms": wide["ms"], "next": has_next, "prev": has_prev})[clash]
    drop: list[Any] = []
    for (_, ms), group in groups.groupby(["key", "ms"], sort=False):
        if ms == last_ms:
            newcomers = ~group["prev"]
            if newcomers.any() and not newcomers.all():
                drop.extend(group.index[~newcomers])
        else:
            continuing = group["next"]
            if continuing.any() and not continuing.all():
                drop.extend(group.index[~continuing])
    return wide.drop(index=drop)


def _labelled_wide(
    results: Mapping[str, Iterable[Series]],
    columns: Sequence[str],
    label_names: Sequence[str],
    key_names: Sequence[str],
    step_s: int | None,
) -> pd.DataFrame:
    """Pivot ``columns`` on full label sets; return labels + ``ms`` + one column per metric."""
    import pandas as pd

    index = _SeriesIndex()
    wide = _pivot(results, columns, lambda m: tuple(gpu_labels(m)[name] for name in label_names), index)
    wide = wide.reset_index()
    label_table = pd.DataFrame(index.labels, columns=list(label_names), dtype=object)
    if step_s is not None and len(label_table):
        key_ids = label_table.groupby(list(key_names), sort=False).ngroup().to_numpy()
        wide = drop_pod_handovers(wide, key_ids, step_s * 1000).reset_index(drop=True)
    rows = label_table.iloc[wide["series"].to_numpy()].reset_index(drop=True)
    return pd.concat([rows, wide.drop(columns=["series"]).reset_index(drop=True)], axis=1)


def gpu_frame(results: Mapping[str, Iterable[Series]], step_s: int | None = None) -> pd.DataFrame:
    """Build the GPU sample frame from ``{frame column: range-query series}`` for every field in the schema.

    Instance-level fields (per MIG instance or whole GPU) are pivoted side by side on the full label set, so a
    GPU exported twice with conflicting labels shows up as a duplicate key for validation to catch (pod
    handovers inside one step are resolved first when ``step_s`` is given, see :func:`drop_pod_handovers`).
    Device-level fields (power, PCIe: no MIG labels) are joined onto every row of their physical GPU.
    """
    import pandas as pd

    label_names = list(schema.GPU_LABELS)
    instance_columns = [c for c, (_, level) in schema.GPU_FIELDS.items() if level == "instance"]
    device_columns = [c for c, (_, level) in schema.GPU_FIELDS.items() if level == "device"]
    frame = _labelled_wide(results, instance_columns, label_names, list(schema.GPU_KEY), step_s)
    device = _labelled_wide(results, device_columns, label_names, ["hostname", "gpu"], step_s)
    if len(device):
        # A physical GPU has one power / PCIe reading; a copy exported twice adds nothing, keep one.
        device = device[["hostname", "gpu", "ms", *device_columns]].drop_duplicates(["hostname", "gpu", "ms"])
        frame = frame.merge(device, on=["hostname", "gpu", "ms"], how="left")
    for column in schema.GPU_FIELDS:
        if column not in frame.columns:
            frame[column] = np.nan
    frame[schema.TIMESTAMP] = pd.to_datetime(frame["ms"].astype("int64"), unit="ms", utc=True)
    frame["gpu"] = pd.to_numeric(frame["gpu"], errors="coerce").fillna(-1).astype("int64")
    frame = frame[list(schema.GPU_COLUMNS)].astype(schema.GPU_DTYPES)
    return frame.sort_values([*schema.GPU_KEY, schema.TIMESTAMP], ignore_index=True)


def demand_frame(requests: Iterable[Series], unschedulable: Iterable[Series]) -> pd.DataFrame:
    """Build the demand frame: every GPU request of every pod container, flagged when the pod is unschedulable."""
    labels = list(schema.DEMAND_LABELS)
    frame = _long_frame(requests, labels, demand_labels).rename(columns={"value": "requested"})
    pending = _long_frame(unschedulable, ["namespace", "pod"], demand_labels)
    pending_keys = set(zip(pending["namespace"], pending["pod"], pending[schema.TIMESTAMP], strict=True))
    frame["unschedulable"] = [
        key in pending_keys
        for key in zip(frame["namespace"], frame["pod"], frame[schema.TIMESTAMP], strict=True)
    ]
    frame = frame[list(schema.DEMAND_COLUMNS)].astype(schema.DEMAND_DTYPES)
    return frame.sort_values([schema.TIMESTAMP, *labels], ignore_index=True)
