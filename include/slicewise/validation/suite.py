"""The expectations a metrics partition must meet, as Great Expectations 1.x objects.

Each builder returns :class:`Check` s: one GX expectation plus the raw columns it reads, so the runner can
leave out a check whose columns are missing or mistyped (the schema suite already reports those) instead of
letting it fail with a KeyError. Every expectation carries:

- ``notes``: why it exists, in words an on-call engineer understands (shown in Data Docs and failure lines);
- ``meta["what"]``: the short name of the problem when it fails;
- ``meta`` formatting hints for the failure line (``unit``, ``example``, ``sort``; see :mod:`.explain`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import great_expectations.expectations as gxe
from great_expectations.expectations.row_conditions import Column

from slicewise import schema
from slicewise.settings import Settings
from slicewise.validation import checks

#: GX type names for the contract's pandas dtypes. GX compares ``dtype.type``: a tz-aware timestamp column
#: has type ``Timestamp`` (a naive one ``datetime64``, which fails); ``string`` columns have type ``str``.
GX_TYPES = {
    "datetime64[ns, UTC]": "Timestamp",
    "string": "str",
    "int64": "int64",
    "float64": "float64",
    "bool": "bool",
}


@dataclass(frozen=True)
class Check:
    """One expectation and the raw frame columns it needs to be meaningful."""

    expectation: gxe.Expectation
    needs: frozenset[str]


def _check(
    expectation: type[gxe.Expectation],
    *,
    needs: Iterable[str],
    what: str,
    why: str,
    unit: str = "rows",
    example: str = "{v}",
    sort: str = "",
    **kwargs: Any,
) -> Check:
    meta = {"what": what, "unit": unit, "example": example, "sort": sort}
    return Check(expectation(notes=why, meta=meta, **kwargs), frozenset(needs))


def _whole_gpu() -> Any:
    """Rows of a physical GPU (not a MIG instance): dcgm-exporter leaves GPU_I_PROFILE empty on those."""
    return Column("mig_profile") == ""


# --- schema -----------------------------------------------------------------------------------------------


def schema_checks(
    kind: str, columns: Sequence[str], dtypes: dict[str, str], present: Iterable[str]
) -> list[Check]:
    """Exact column set and the dtype of every contract column that is present (a missing one is reported by
    the column-set expectation, once)."""
    present = set(present)
    found = [
        _check(
            gxe.ExpectTableColumnsToMatchSet,
            needs=(),
            what=f"{kind} frame columns differ from the contract",
            # Readers (forecaster, cost report) select columns by name: a missing or extra column means the
            # exporter, the PromQL or the frame builder changed, and downstream code would break or ignore it.
            why="every reader selects these columns by name",
            column_set=list(columns),
            exact_match=True,
        )
    ]
    for column in columns:
        if column not in present:
            continue
        found.append(
            _check(
                gxe.ExpectColumnValuesToBeOfType,
                needs=(column,),
                what=f"{kind} column {column} has the wrong dtype",
                # Parquet keeps whatever dtype was written: numbers stored as text or naive timestamps break
                # arithmetic, joins and interval filters silently further down the loop.
                why=f"the contract says {dtypes[column]}; other dtypes break maths and joins downstream",
                example=dtypes[column],
                column=column,
                type_=GX_TYPES[dtypes[column]],
            )
        )
    return found


def gpu_schema(present: Iterable[str]) -> list[Check]:
    """Schema of the GPU sample frame, plus: it is not empty."""
    return [
        *schema_checks("GPU", schema.GPU_COLUMNS, schema.GPU_DTYPES, present),
        _check(
            gxe.ExpectTableRowCountToBeBetween,
            needs=(),
            what="GPU frame is empty",
            # An hour without a single sample means Prometheus or dcgm-exporter returned nothing; published,
            # it would read as an idle fleet and the planner would shrink partitions for no reason.
            why="no samples at all: the scrape or the query failed, the fleet was not idle",
            min_value=1,
        ),
    ]


def demand_schema(present: Iterable[str]) -> list[Check]:
    """Schema of the demand frame. An empty demand frame is valid: no pod asked for a GPU that hour."""
    return schema_checks("demand", schema.DEMAND_COLUMNS, schema.DEMAND_DTYPES, present)


# --- GPU samples (one row per timestamp and GPU / MIG instance) ---------------------------------------------


def _range(column: str, low: float, high: float | None, why: str) -> Check:
    """``low <= value <= high``; without ``high``, ``low <= value < inf``: Prometheus sends ``+Inf`` for a
    broken counter, and an open upper bound would let it through."""
    return _check(
        gxe.ExpectColumnValuesToBeBetween,
        needs=(column,),
        what=f"{column} outside {low:g}-{high:g}"
        if high is not None
        else f"{column} below {low:g} or infinite",
        why=why,
        column=column,
        min_value=low,
        max_value=high if high is not None else math.inf,
        strict_max=high is None,
    )


def _not_null(column: str, why: str, *, whole_gpu_only: bool = False, kind: str = "") -> Check:
    where = " on whole-GPU rows" if whole_gpu_only else ""
    return _check(
        gxe.ExpectColumnValuesToNotBeNull,
        needs=(column, "mig_profile") if whole_gpu_only else (column,),
        what=f"{kind}{column} missing{where}",
        why=why,
        example="",
        column=column,
        row_condition=_whole_gpu() if whole_gpu_only else None,
    )


def _present(column: str, why: str, *, kind: str = "") -> list[Check]:
    """The column is neither null nor an empty string."""
    return [
        _not_null(column, why, kind=kind),
        _check(
            gxe.ExpectColumnValueLengthsToBeBetween,
            needs=(column,),
            what=f"{kind}{column} empty",
            why=why,
            example="",
            column=column,
            min_value=1,
        ),
    ]


def gpu_samples(interval_start: datetime, interval_end: datetime) -> list[Check]:
    """Value ranges, labels, uniqueness and the interval of the GPU sample rows."""
    key = [*schema.GPU_KEY, schema.TIMESTAMP]
    found = [
        # Percent by definition; the forecaster's features are scaled assuming it.
        _range("gpu_util", 0, 100, "utilisation is a percentage; the forecaster scales it as one"),
        # dcgm-exporter does not export GPU_UTIL for MIG instances, so NaN is expected there (engine_active
        # carries their load); on a whole GPU a NaN means the field was lost.
        _not_null("gpu_util", "a whole GPU always reports utilisation", whole_gpu_only=True),
        # Ratios of time the engine / DRAM was busy; they are the MIG instances' only load signal.
        _range("engine_active", 0, 1, "a busy-time ratio; it is the load signal the forecaster learns"),
        _not_null("engine_active", "the forecaster's load signal; a gap becomes a fake idle period"),
        _range("dram_active", 0, 1, "a busy-time ratio; memory-bound load is planned from it"),
        _not_null("dram_active", "memory-bound load is planned from it; a gap hides it"),
        # Negative or infinite memory is a counter or unit bug; idle memory would be computed from it.
        _range(
            "fb_used_mib",
            0,
            None,
            "framebuffer use is a finite, non-negative size; idle memory is derived from it",
        ),
        _range("fb_free_mib", 0, None, "free framebuffer is a finite, non-negative size"),
        # Power and PCIe throughput are device readings; negatives or +Inf come from counter resets or unit
        # bugs and would show up as negative or infinite cost in the report.
        _range("power_w", 0, None, "power draw is finite and non-negative; the cost report bills it"),
        _range("pcie_tx_bytes_per_s", 0, None, "a throughput is finite and non-negative"),
        _range("pcie_rx_bytes_per_s", 0, None, "a throughput is finite and non-negative"),
        # The frame builder turns a missing or non-numeric `gpu` label into -1.
        _range("gpu", 0, None, "the gpu label was missing or not a number"),
        # A GPU cannot use more memory than it has: a larger value means the model or MIG profile label is
        # wrong, and the planner would size MIG slices from a device that does not exist.
        _check(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB,
            needs=("model_name", "mig_profile", "fb_used_mib", "fb_free_mib"),
            what="fb_used_mib above the device's memory",
            why="more memory used than the GPU or MIG profile has: the model or profile label is wrong",
            example="{b:,.0f} of {a:,.0f} MiB",
            column_A=checks.CAPACITY,
            column_B="fb_used_mib",
            or_equal=True,
            ignore_row_if="either_value_is_missing",
        ),
    ]
    for label in ("hostname", "model_name", "uuid"):
        # These labels identify and price a GPU; without them a sample cannot be attributed to a node/model.
        found += _present(label, "the sample cannot be attributed to a GPU without it")
    for label in ("gpu_instance_id", "mig_profile", "namespace", "pod", "container"):
        # The contract writes "" for an unset label; a null breaks the series key and its joins.
        found.append(_not_null(label, 'an unset label must be "", a null breaks series keys and joins'))
    found += [
        # Two rows for one GPU at one instant: the exporter is scraped twice or labels collide; sums and
        # forecasts would double-count that GPU.
        _check(
            gxe.ExpectCompoundColumnsToBeUnique,
            needs=key,
            what="duplicate GPU samples (same hostname, gpu, gpu_instance_id, timestamp)",
            why="the GPU would be counted twice in load and cost",
            example="",
            column_list=key,
        ),
        _interval_check("GPU", interval_start, interval_end),
    ]
    return found


def _interval_check(kind: str, interval_start: datetime, interval_end: datetime) -> Check:
    # A partition holds exactly its hour: a sample outside [start, end) would be counted in two partitions
    # (or none) when hours are concatenated for training and reports.
    return _check(
        gxe.ExpectColumnValuesToBeBetween,
        needs=(schema.TIMESTAMP,),
        what=f"{kind} timestamp outside [{interval_start:%Y-%m-%d %H:%M}, {interval_end:%H:%M}) UTC",
        why="a sample outside its hour is counted twice or never when hours are joined",
        example="",  # the row label already shows the time
        column=schema.TIMESTAMP,
        min_value=interval_start,
        max_value=interval_end,
        strict_max=True,
    )


# --- GPU series (one row per GPU / MIG instance seen now or in the previous hour) ---------------------------


def gpu_series(settings: Settings, *, with_previous: bool) -> list[Check]:
    """Completeness, staleness and continuity of each GPU series; needs the key columns and timestamps."""
    needs = (*schema.GPU_KEY, schema.TIMESTAMP)
    found = [
        # Gaps make the forecaster learn idle periods that did not happen; below the threshold the hour is not
        # representative of the series.
        _check(
            gxe.ExpectColumnValuesToBeBetween,
            needs=needs,
            what=f"series below {settings.min_completeness:.0%} of expected samples",
            why="gaps teach the forecaster idle time that never happened",
            unit="series",
            example="{v:.0%}",
            sort="asc",
            column=checks.COMPLETENESS,
            min_value=settings.min_completeness,
        ),
        # A series whose newest sample is old at the hour's end stopped reporting (exporter crash, node gone)
        # even if the earlier part of the hour was complete.
        _check(
            gxe.ExpectColumnValuesToBeBetween,
            needs=needs,
            what=f"series silent for more than {settings.max_staleness_s:g} s before the hour's end",
            why="the exporter or node stopped reporting during the hour",
            unit="series",
            example="{v:,.0f} s",
            sort="desc",
            column=checks.STALENESS_S,
            max_value=settings.max_staleness_s,
        ),
    ]
    if with_previous:
        # GPUs do not disappear between two hours without a reason (node drained, exporter down, MIG layout
        # changed): more than the allowed share vanishing at once means the data, not the fleet, changed.
        found.append(
            _check(
                gxe.ExpectColumnValuesToBeInSet,
                needs=needs,
                what="GPU series of the previous hour vanished",
                why="a large share of GPUs vanishing at once is a scrape problem, not a fleet change",
                unit="previous series",
                example="",
                column=checks.PRESENT,
                value_set=[True],
                mostly=max(0.0, 1.0 - settings.max_vanished_share),
                row_condition=Column(checks.IN_PREVIOUS) == True,  # noqa: E712 (a GX condition, not a test)
            )
        )
    return found


# --- demand ---------------------------------------------------------------------------------------------------


def _requested_at_most(bound: int, unit: str, rows: Any) -> Check:
    return _check(
        gxe.ExpectColumnValuesToBeBetween,
        needs=("requested", "resource"),
        what=f"demand requested above {bound} {unit}",
        why="no node offers that many: the series is broken",
        column="requested",
        max_value=bound,
        row_condition=rows,
    )


def demand_rows(interval_start: datetime, interval_end: datetime) -> list[Check]:
    """Values, labels, uniqueness and the interval of the demand rows."""
    key = [schema.TIMESTAMP, "namespace", "pod", "container", "resource"]
    found = [
        # A request is a count of GPUs, MIG slices or MPS replicas; negative or missing demand would shrink
        # the planned capacity.
        _check(
            gxe.ExpectColumnValuesToBeBetween,
            needs=("requested",),
            what="demand requested below 0",
            why="a request counts devices; negative demand would shrink planned capacity",
            column="requested",
            min_value=0,
        ),
        _not_null("requested", "missing demand reads as no demand", kind="demand "),
        # Upper bounds per resource kind, which also refuse +Inf: one pod's request beyond what any node holds
        # is a broken series, and the planner would plan whole nodes for it.
        _requested_at_most(schema.MAX_GPUS_PER_POD, "nvidia.com/gpu", Column("resource") == schema.KSM_GPU),
        _requested_at_most(
            schema.MAX_SHARES_PER_POD,
            "MIG instances or GPU replicas",
            Column("resource").is_not_in([schema.KSM_GPU]),
        ),
        # Unschedulable pods are the demand the fleet failed to serve: the planner weighs them most.
        _not_null("unschedulable", "unserved demand is what the planner weighs most", kind="demand "),
        # One container's request for one resource at one instant is a single number; duplicates double it.
        _check(
            gxe.ExpectCompoundColumnsToBeUnique,
            needs=key,
            what="duplicate demand rows (same timestamp, namespace, pod, container, resource)",
            why="the request would be counted twice",
            example="",
            column_list=key,
        ),
        _interval_check("demand", interval_start, interval_end),
    ]
    for label in ("namespace", "pod", "resource"):
        # Demand is attributed to a workload and a resource kind; without them it cannot be planned for.
        found += _present(label, "demand cannot be attributed without it", kind="demand ")
    # A declared share is a share of one GPU; missing (NaN) means the pod declares none.
    found.append(
        _check(
            gxe.ExpectColumnValuesToBeBetween,
            needs=("declared_share",),
            what="demand declared_share outside (0, 1]",
            why="a share of one GPU; the planner would size the pod's slot from it",
            column="declared_share",
            min_value=0,
            max_value=1,
            strict_min=True,
        )
    )
    for label in ("container", "node", *schema.DEMAND_SELECTORS):
        # "" is valid (a pending pod has no node); null is not, it breaks joins.
        found.append(_not_null(label, 'an unset label must be "", a null breaks joins', kind="demand "))
    found.append(
        _check(
            gxe.ExpectColumnValuesToBeInSet,
            needs=("gpu_sharing",),
            what="demand gpu_sharing not a GPU feature discovery sharing strategy",
            why="the planner hosts a pod pinned to a sharing strategy only where that strategy will be",
            column="gpu_sharing",
            value_set=list(schema.SHARING_STRATEGIES),
        )
    )
    found.append(
        _check(
            gxe.ExpectColumnValuesToMatchRegex,
            needs=("gpu_replicas",),
            what="demand gpu_replicas not a replica count",
            why="the planner hosts a pod pinned to a replica count only where that count will be",
            column="gpu_replicas",
            regex=r"^(?:[1-9][0-9]*)?$",
        )
    )
    return found
