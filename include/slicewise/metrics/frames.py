"""Turn Prometheus range-query results into the tidy frames of :mod:`slicewise.schema`.

Label dialects handled here, so nothing downstream sees them:
- node: ``Hostname`` (dcgm-exporter <= 4.5.3-4.8.2) or ``hostname`` (later);
- pod attribution: with ``honor_labels: false`` (the GPU Operator's ServiceMonitor default) Prometheus renames
  the exporter's ``pod``/``namespace``/``container`` to ``exported_*`` and sets ``pod`` to the exporter's own
  pod, so an ``exported_*`` label wins whenever present;
- GPU id: ``UUID`` or ``uuid`` (``--use-old-namespace``).

Query responses are turned into :class:`CompactSeries` (a label tuple and two numpy arrays) as soon as they
arrive, so the decoded JSON of one response is all that is ever held in Python objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise import schema

if TYPE_CHECKING:
    import pandas as pd

#: One series of a range query: ``{"metric": {label: value}, "values": [[unix_ts, "value"], ...]}``.
Series = Mapping[str, Any]
LabelShape = Callable[[Mapping[str, str]], tuple[str, ...]]

DEMAND_POD = ("namespace", "pod")


@dataclass(frozen=True)
class CompactSeries:
    """One series with normalised labels (in the frame's label order) and its samples as arrays."""

    labels: tuple[str, ...]
    ms: np.ndarray  # int64 unix milliseconds
    values: np.ndarray  # float64; NaN and +-Inf kept for validation to judge


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


def _last_per_pod(series: Iterable[CompactSeries]) -> dict[tuple[str, ...], str]:
    """(namespace, pod) -> the form value of its latest sample."""
    latest: dict[tuple[str, ...], tuple[int, str]] = {}
    for item in series:
        pod, value = item.labels[:2], item.labels[2]
        last = int(item.ms.max()) if len(item.ms) else -1
        if value and (pod not in latest or last >= latest[pod][0]):
            latest[pod] = (last, value)
    return {pod: value for pod, (_, value) in latest.items()}


def gpu_label_tuple(labels: Mapping[str, str]) -> tuple[str, ...]:
    shaped = gpu_labels(labels)
    return tuple(shaped[name] for name in schema.GPU_LABELS)


def demand_label_tuple(labels: Mapping[str, str]) -> tuple[str, ...]:
    shaped = demand_labels(labels)
    return tuple(shaped[name] for name in schema.DEMAND_LABELS)


def pod_label_tuple(labels: Mapping[str, str]) -> tuple[str, ...]:
    shaped = demand_labels(labels)
    return tuple(shaped[name] for name in DEMAND_POD)


def pod_form_shape(label: str) -> LabelShape:
    """The shape of a per-pod kube-state-metrics series carrying one form in ``label``: (namespace, pod, value)."""

    def shape(labels: Mapping[str, str]) -> tuple[str, ...]:
        return (*pod_label_tuple(labels), labels.get(label, ""))

    return shape


def compact(raw: Iterable[Series | CompactSeries], shape: LabelShape) -> list[CompactSeries]:
    """Compact query-response series (already compact ones pass through); empty series are dropped."""
    out = []
    for item in raw:
        if isinstance(item, CompactSeries):
            out.append(item)
            continue
        points = item.get("values") or []
        if not points:
            continue
        table = np.asarray(points, dtype=object)
        ms = np.round(table[:, 0].astype(np.float64) * 1000).astype(np.int64)
        # Prometheus sends values as strings; "NaN" and "+Inf" parse as floats and are left for validation.
        out.append(CompactSeries(shape(item.get("metric", {})), ms, table[:, 1].astype(np.float64)))
    return out


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
    results: Mapping[str, Sequence[CompactSeries]], columns: Sequence[str], index: _SeriesIndex
) -> pd.DataFrame:
    """Wide frame with columns ``series`` (id in ``index``), ``ms`` and one column per metric in ``columns``."""
    import pandas as pd

    ids: list[np.ndarray] = []
    stamps: list[np.ndarray] = []
    values: list[np.ndarray] = []
    fields: list[np.ndarray] = []
    for field_no, column in enumerate(columns):
        seen: dict[tuple[str, ...], int] = {}
        for item in results.get(column, ()):
            series_id = index.assign(item.labels, seen)
            ids.append(np.full(len(item.ms), series_id, dtype=np.int64))
            stamps.append(item.ms)
            values.append(item.values)
            fields.append(np.full(len(item.ms), field_no, dtype=np.int8))
    if not ids:
        return pd.DataFrame(
            {
                "series": pd.Series(dtype="int64"),
                "ms": pd.Series(dtype="int64"),
                **{c: pd.Series(dtype="float64") for c in columns},
            }
        )
    long = pd.DataFrame(
        {
            "series": np.concatenate(ids),
            "ms": np.concatenate(stamps),
            "field": np.concatenate(fields),
            "value": np.concatenate(values),
        }
    )
    wide = long.groupby(["series", "ms", "field"], sort=False)["value"].last().unstack("field")
    del long
    wide.columns = [columns[int(c)] for c in wide.columns]
    return wide.reindex(columns=list(columns)).reset_index()


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
    results: Mapping[str, Sequence[CompactSeries]],
    columns: Sequence[str],
    key_names: Sequence[str],
    step_s: int | None,
) -> pd.DataFrame:
    """Pivot ``columns`` on full GPU label sets; return the label columns + ``ms`` + one column per metric."""
    import pandas as pd

    index = _SeriesIndex()
    wide = _pivot(results, columns, index)
    label_names = list(schema.GPU_LABELS)
    label_table = pd.DataFrame(index.labels, columns=label_names, dtype=object)
    if step_s is not None and len(label_table):
        key_ids = label_table.groupby(list(key_names), sort=False).ngroup().to_numpy()
        wide = drop_pod_handovers(wide, key_ids, step_s * 1000).reset_index(drop=True)
    codes = wide["series"].to_numpy()
    for name in label_names:
        wide[name] = _take_labels(label_table[name], codes)
    return wide.drop(columns=["series"])


def _take_labels(labels: pd.Series, codes: np.ndarray) -> pd.Series:
    """``labels[codes]`` as a categorical column: memory per distinct value, not per row."""
    import pandas as pd

    categories, inverse = np.unique(labels.to_numpy(dtype=str), return_inverse=True)
    return pd.Series(pd.Categorical.from_codes(inverse[codes], categories=pd.Index(categories)))


def gpu_frame(
    results: Mapping[str, Iterable[Series | CompactSeries]], step_s: int | None = None
) -> pd.DataFrame:
    """Build the GPU sample frame from ``{frame column: range-query series}`` for every field in the schema.

    Instance-level fields (per MIG instance or whole GPU) are pivoted side by side on the full label set, so a
    GPU exported twice with conflicting labels shows up as a duplicate key for validation to catch (pod
    handovers inside one step are resolved first when ``step_s`` is given, see :func:`drop_pod_handovers`).
    Device-level fields (power, PCIe: no MIG labels) are joined onto every row of their physical GPU.
    """
    import pandas as pd

    compacted = {column: compact(results.get(column, ()), gpu_label_tuple) for column in schema.GPU_FIELDS}
    instance_columns = [c for c, (_, level) in schema.GPU_FIELDS.items() if level == "instance"]
    device_columns = [c for c, (_, level) in schema.GPU_FIELDS.items() if level == "device"]
    frame = _labelled_wide(compacted, instance_columns, list(schema.GPU_KEY), step_s)
    device = _labelled_wide(compacted, device_columns, ["hostname", "gpu"], step_s)
    if len(device) and len(frame):
        # A physical GPU has one power / PCIe reading; a copy exported twice adds nothing, keep one.
        device = device[["hostname", "gpu", "ms", *device_columns]].drop_duplicates(["hostname", "gpu", "ms"])
        for key in ("hostname", "gpu"):  # categoricals merge only on identical categories
            device[key] = device[key].astype(str)
            frame[key] = frame[key].astype(str)
        frame = frame.merge(device, on=["hostname", "gpu", "ms"], how="left")
    for column in schema.GPU_FIELDS:
        if column not in frame.columns:
            frame[column] = np.nan
    frame[schema.TIMESTAMP] = pd.to_datetime(frame["ms"].astype("int64"), unit="ms", utc=True)
    frame["gpu"] = pd.to_numeric(frame["gpu"].astype(str), errors="coerce").fillna(-1).astype("int64")
    frame = frame[list(schema.GPU_COLUMNS)].astype(schema.GPU_DTYPES)
    return frame.sort_values([*schema.GPU_KEY, schema.TIMESTAMP], ignore_index=True)


def demand_frame(
    requests: Iterable[Series | CompactSeries],
    unschedulable: Iterable[Series | CompactSeries],
    shares: Iterable[CompactSeries] = (),
    selectors: Mapping[str, Iterable[CompactSeries]] | None = None,
    opted_in: Iterable[CompactSeries] = (),
) -> pd.DataFrame:
    """Build the demand frame: every GPU request of every pod container, flagged when the pod is unschedulable,
    with the pod's declared share, what its nodeSelector names (``selectors``: per string-valued form of
    ``schema.DEMAND_SELECTORS``) and whether it opts in to evictions (``opted_in``: its annotation ``"true"``);
    every series shaped by :func:`pod_form_shape`; a pod's last value wins."""
    import pandas as pd

    index = _SeriesIndex()
    wide = _pivot({"requested": compact(requests, demand_label_tuple)}, ["requested"], index)
    labels = pd.DataFrame(index.labels, columns=list(schema.DEMAND_LABELS), dtype=object)
    codes = wide["series"].to_numpy()
    for name in schema.DEMAND_LABELS:
        wide[name] = _take_labels(labels[name], codes)
    # A pod is unschedulable at a step when kube_pod_status_unschedulable == 1 there: match on integer keys.
    pod_ids: dict[tuple[str, ...], int] = {}
    row_pods = np.array(
        [
            pod_ids.setdefault((namespace, pod), len(pod_ids))
            for namespace, pod in zip(labels["namespace"], labels["pod"], strict=True)
        ],
        dtype=np.int64,
    )
    pending_keys = [
        pod_ids[item.labels] * 2**42 + item.ms
        for item in compact(unschedulable, pod_label_tuple)
        if item.labels in pod_ids
    ]
    row_keys = row_pods[codes] * 2**42 + wide["ms"].to_numpy() if len(codes) else np.empty(0, dtype=np.int64)
    wide["unschedulable"] = np.isin(row_keys, np.concatenate(pending_keys)) if pending_keys else False
    pods = list(zip(labels["namespace"], labels["pod"], strict=True))
    share_of = _last_per_pod(shares)
    declared = np.array([schema.parse_gpu_share(share_of.get(p)) for p in pods], dtype=np.float64)
    wide["declared_share"] = declared[codes] if len(codes) else np.empty(0)
    for form in schema.DEMAND_SELECTORS:
        value_of = _last_per_pod((selectors or {}).get(form, ()))
        wide[form] = np.array([value_of.get(p, "") for p in pods], dtype=object)[codes]
    opt_in_of = _last_per_pod(opted_in)
    opts_in = np.array([opt_in_of.get(p) == "true" for p in pods], dtype=bool)
    wide["eviction_opt_in"] = opts_in[codes] if len(codes) else np.empty(0, dtype=bool)
    wide[schema.TIMESTAMP] = pd.to_datetime(wide["ms"].astype("int64"), unit="ms", utc=True)
    frame = wide[list(schema.DEMAND_COLUMNS)].astype(schema.DEMAND_DTYPES)
    return frame.sort_values([schema.TIMESTAMP, *schema.DEMAND_LABELS], ignore_index=True)
