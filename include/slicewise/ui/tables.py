"""Tables of strings for the pages, and how numbers read in them.

Pure: no I/O and no HTML (the templates escape every string).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Link:
    text: str
    href: str  # relative to the app's root (the pages set <base href>)


Cell = str | Link


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    numeric: frozenset[int] = field(default_factory=frozenset)  # indexes of right-aligned columns
    row_classes: tuple[str, ...] = ()  # a CSS class per row ("" for none), e.g. the plan's action

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"row {row!r} has {len(row)} cells for {len(self.columns)} columns")


# -- formatting -------------------------------------------------------------------------------------------------


def number(value: Any, decimals: int = 2) -> str:
    """Thousands separators; ``decimals`` places for floats; "-" for None and NaN; other values as text."""
    if value is None or isinstance(value, bool):
        return "-" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:,.{decimals}f}"
    return str(value)


def money(value: Any, currency: str) -> str:
    text = number(value)
    return text if text == "-" or not is_number(value) else f"{text} {currency}".strip()


def share(value: Any) -> str:
    """A 0-1 ratio as a percentage."""
    if is_number(value) and not math.isnan(value):
        return f"{value:.1%}"
    return number(value)


def at(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def kind(key: str) -> str:
    """How a number under ``key`` reads, from its name (the report follows OpenCost's camelCase names):
    "money" (costs, prices), "share" (efficiencies, rates), "hours" (GPU-hours) or "plain"."""
    name = key.lower()
    if "cost" in name or "price" in name:
        return "money"
    if "efficiency" in name or name.endswith("rate"):
        return "share"
    if "hours" in name:
        return "hours"
    return "plain"


def formatted(key: str, value: Any, currency: str) -> str:
    """A value for a reader: numbers by :func:`kind`, lists and objects as compact JSON, text as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and not any(isinstance(v, Mapping | list) for v in value):
        return ", ".join(formatted(key, v, currency) for v in value) or "-"
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True, default=str)
    if not is_number(value):
        return number(value)
    how = kind(key)
    if how == "money":
        return money(value, currency)
    if how == "share":
        return share(value)
    if how == "hours" or isinstance(value, int):
        return number(value)
    if math.isnan(value):
        return "-"
    return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def record_table(records: Sequence[Mapping[str, Any]], currency: str = "") -> Table:
    """Records as rows under the union of their keys (first-seen order); all-number columns right-aligned."""
    columns = list(dict.fromkeys(k for record in records for k in record))
    rows = tuple(tuple(formatted(c, r.get(c), currency) for c in columns) for r in records)
    numeric = frozenset(
        i
        for i, c in enumerate(columns)
        if all(r.get(c) is None or is_number(r.get(c)) for r in records) and any(c in r for r in records)
    )
    return Table(tuple(str(c) for c in columns), rows, numeric)


def value_tables(value: Any, currency: str = "") -> tuple[tuple[tuple[str, Table], ...], str]:
    """A JSON value whose shape the page does not know in advance, as (caption, table) pairs and a text.

    A list of objects is one table; an object gives a key/value table of its scalars, then one captioned table
    per nested object or list of objects; a scalar or a list of scalars is the text; empty values read "none".
    """
    if value in (None, [], {}, ""):
        return (), "none"
    if isinstance(value, list):
        if all(isinstance(item, Mapping) for item in value):
            return (("", record_table(value, currency)),), ""
        return (), ", ".join(formatted("", item, currency) for item in value)
    if not isinstance(value, Mapping):
        return (), formatted("", value, currency)
    scalars = [(str(k), v) for k, v in value.items() if not _nested(v)]
    tables: list[tuple[str, Table]] = []
    if scalars:
        rows = tuple((k, formatted(k, v, currency)) for k, v in scalars)
        tables.append(("", Table(("", "value"), rows)))
    for key, nested in value.items():
        if not _nested(nested):
            continue
        if isinstance(nested, list):
            tables.append((str(key), record_table(nested, currency)))
        elif all(isinstance(v, Mapping) for v in nested.values()):  # e.g. per predictor: one row each
            records = [{"": k, **v} for k, v in nested.items()]
            tables.append((str(key), record_table(records, currency)))
        else:
            rows = tuple((str(k), formatted(str(k), v, currency)) for k, v in nested.items())
            tables.append((str(key), Table(("", "value"), rows)))
    return tuple(tables), ""


def _nested(value: Any) -> bool:
    """An object, or a non-empty list of objects: shown as a table of its own."""
    if isinstance(value, Mapping):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)
