"""Turn failed GX expectation results into one short line each that an on-call engineer can act on.

A line reads ``<what>: <how many> (e.g. <examples>) - <why>``, for instance::

    engine_active outside 0-1: 3 of 3,600 rows (e.g. 1.7 on node-a gpu 2 at 10:05) - a busy-time ratio; ...

``what`` and ``why`` come from the expectation itself (``meta["what"]`` and ``notes``), so the suite stays the
single place that says what is checked and why.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuiteValidationResult, ExpectationValidationResult

MAX_EXAMPLES = 3


def failure_lines(
    result: ExpectationSuiteValidationResult, order: Mapping[str | None, int], labels: Sequence[str] | None
) -> list[str]:
    """One line per failed expectation of ``result``, in the suite's order."""
    failed = [item for item in result.results if not item.success]
    failed.sort(
        key=lambda item: order.get(item.expectation_config.id if item.expectation_config else None, 0)
    )
    return [failure_line(item, labels) for item in failed]


def failure_line(item: ExpectationValidationResult, labels: Sequence[str] | None) -> str:
    """The line for one failed expectation; never raises on an unexpected result shape."""
    config = item.expectation_config
    meta = dict(config.meta or {}) if config else {}
    what = str(meta.get("what") or (config.type if config else "expectation"))
    notes = config.notes if config else None
    why = notes if isinstance(notes, str) else "; ".join(notes or [])
    try:
        detail = _detail(item, meta, labels)
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # a GX result shape we did not foresee
        detail = f"failed ({type(exc).__name__} while describing it)"
    return f"{what}: {detail}" + (f" - {why}" if why else "")


def _detail(item: ExpectationValidationResult, meta: Mapping[str, Any], labels: Sequence[str] | None) -> str:
    error = _exception_message(item.exception_info)
    if error:
        return f"could not be evaluated ({error})"
    config = item.expectation_config
    kind = config.type if config else ""
    result: dict[str, Any] = dict(item.result or {})
    if kind == "expect_table_columns_to_match_set":
        mismatched = result.get("details", {}).get("mismatched", {})
        parts = [
            f"{name} {', '.join(map(str, mismatched[name]))}"
            for name in ("missing", "unexpected")
            if mismatched.get(name)
        ]
        return "; ".join(parts) or f"found {', '.join(map(str, result.get('observed_value', [])))}"
    if kind == "expect_column_values_to_be_of_type":
        return f"is {result.get('observed_value')}, expected {meta.get('example')}"
    if kind == "expect_table_row_count_to_be_between":
        return f"{result.get('observed_value', 0):,} rows"
    return _counted(item, result, meta, labels)


def _counted(
    item: ExpectationValidationResult,
    result: Mapping[str, Any],
    meta: Mapping[str, Any],
    labels: Sequence[str] | None,
) -> str:
    unexpected = int(result.get("unexpected_count") or 0)
    # GX counts nulls in element_count but never as unexpected for a range or set rule: leave them out, so
    # "2 of 96 series" counts the series that were actually checked.
    total = int(result.get("element_count") or 0) - int(result.get("missing_count") or 0)
    unit = str(meta.get("unit") or "rows")
    notes: list[str] = []
    kwargs = item.expectation_config.kwargs if item.expectation_config else {}
    mostly = kwargs.get("mostly")
    if mostly is not None and mostly < 1 and total:
        notes.append(f"{unexpected / total:.0%}, at most {1 - mostly:.0%} allowed")
    examples = _examples(result, meta, labels)
    if examples:
        notes.append(f"{'worst' if meta.get('sort') else 'e.g.'} {', '.join(examples)}")
    text = f"{unexpected:,} of {total:,} {unit}"
    return f"{text} ({'; '.join(notes)})" if notes else text


def _examples(result: Mapping[str, Any], meta: Mapping[str, Any], labels: Sequence[str] | None) -> list[str]:
    values = list(result.get("unexpected_list") or result.get("partial_unexpected_list") or [])
    indexes = list(result.get("unexpected_index_list") or result.get("partial_unexpected_index_list") or [])
    pairs = list(zip(values, indexes, strict=False)) if indexes else [(value, None) for value in values]
    if meta.get("sort"):
        pairs.sort(key=lambda pair: _sort_key(pair[0]), reverse=meta["sort"] == "desc")
    template = str(meta.get("example", "{v}"))
    shown: list[str] = []
    seen: set[tuple[str, str]] = set()
    for value, index in pairs:
        label = _label(labels, index)
        rendered = _format(template, value) if template else ""
        # One example per series and value: twenty rows of the same broken GPU say less than three GPUs.
        key = (rendered, label.split(" at ")[0])
        if key in seen or not (rendered or label):
            continue
        seen.add(key)
        shown.append(f"{rendered} on {label}" if rendered and label else rendered or label)
        if len(shown) == MAX_EXAMPLES:
            break
    return shown


def _label(labels: Sequence[str] | None, index: Any) -> str:
    if labels is None or isinstance(index, bool) or not isinstance(index, numbers.Integral):
        return ""
    position = int(index)
    return str(labels[position]) if 0 <= position < len(labels) else ""


def _format(template: str, value: Any) -> str:
    try:
        if isinstance(value, list | tuple) and len(value) == 2:
            return template.format(a=value[0], b=value[1])
        return template.format(v=value)
    except (KeyError, IndexError, TypeError, ValueError):
        return str(value)


def _sort_key(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.inf
    return number if not math.isnan(number) else math.inf


def _exception_message(info: Any) -> str:
    """GX reports an evaluation error either flat or per metric; return its first line, or ""."""
    if not isinstance(info, Mapping):
        return ""
    if info.get("raised_exception"):
        return str(info.get("exception_message") or "error").strip().splitlines()[0][:200]
    for value in info.values():
        nested = _exception_message(value)
        if nested:
            return nested
    return ""
