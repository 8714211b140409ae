"""What one GPU-hour costs: a price table per GPU model, overridable per node (pool) by a label.

The table lives in ``include/config/prices.yaml`` (its comments cite where each number comes from). Every price
carries its source in words, and the report prints it next to the money, so nobody mistakes the $0.95 default
for a quote.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from slicewise.errors import PermanentError

PRICES_FILE = "prices.yaml"
#: OpenCost's default GPU price, $ per GPU-hour (opencost/opencost configs/default.json).
OPENCOST_DEFAULT = 0.95


class PriceError(PermanentError, ValueError):
    """The price table is malformed."""


@dataclass(frozen=True)
class Price:
    """$ per GPU-hour and where that number comes from."""

    per_gpu_hour: float
    source: str


@dataclass(frozen=True)
class PriceTable:
    currency: str = "USD"
    default_price: float = OPENCOST_DEFAULT
    default_source: str = "default $0.95/GPU-h (OpenCost's default)"
    node_price_label: str = "slicewise.io/price-per-gpu-hour"
    pool_label: str = "slicewise.io/node-pool"
    pools: Mapping[str, float] = field(default_factory=dict)
    models: Mapping[str, Price] = field(default_factory=dict)

    def price_for(self, gpu_model: str, labels: Mapping[str, str] | None = None) -> Price:
        """The price of one GPU-hour of ``gpu_model`` (a catalogue name, "" when unknown) on a node with
        ``labels``: the node's price label, else its pool's price, else the model's, else the default.

        A price label that is not a non-negative number is ignored (the source says so) rather than guessed.
        """
        labels = labels or {}
        ignored = ""
        raw = labels.get(self.node_price_label)
        if raw is not None:
            value = _number(raw)
            if value is not None:
                return Price(value, f"node label {self.node_price_label}={raw}")
            ignored = f"; node label {self.node_price_label}={raw!r} is not a price, ignored"
        pool = labels.get(self.pool_label)
        if pool is not None and pool in self.pools:
            return Price(self.pools[pool], f"pool {self.pool_label}={pool} (prices.yaml)" + ignored)
        if gpu_model in self.models:
            found = self.models[gpu_model]
            return Price(found.per_gpu_hour, found.source + ignored)
        what = f"no price for GPU model {gpu_model!r}" if gpu_model else "unknown GPU model"
        return Price(self.default_price, f"{self.default_source}: {what}{ignored}")


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def load_prices(path: Path | None = None, known_models: Collection[str] | None = None) -> PriceTable:
    """The price table of ``path`` (default ``include/config/prices.yaml``, else the setting
    ``cost_prices_file``); PriceError, naming the setting and the file, when it is missing or malformed or
    prices a GPU model that is not in ``known_models`` (default: the catalogue's): a typo there would price
    those GPUs at the default without a word."""
    if path is None:
        from slicewise.settings import CONFIG_DIR

        path = CONFIG_DIR / PRICES_FILE
    where = f"price file {path} (setting cost_prices_file)"
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise PriceError(f"{where}: no such file") from None
    except OSError as exc:
        raise PriceError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise PriceError(f"{where}: not valid YAML{at}: {problem}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("models") or {}, dict):
        raise PriceError(f"{where}: expected a mapping with a mapping under models")
    if known_models is None:
        from slicewise.catalog import load_catalog

        known_models = set(load_catalog().models)
    unknown = sorted(str(name) for name in (raw.get("models") or {}) if str(name) not in known_models)
    if unknown:
        raise PriceError(
            f"{where}: models.{unknown[0]} names no catalogue GPU model (known: {', '.join(sorted(known_models))})"
            + (f"; also {', '.join(unknown[1:])}" if len(unknown) > 1 else "")
        )
    try:
        models = {
            str(name): Price(_checked(spec["price_per_gpu_hour"], f"models.{name}"), str(spec["source"]))
            for name, spec in (raw.get("models") or {}).items()
        }
        pools = {str(k): _checked(v, f"pools.{k}") for k, v in (raw.get("pools") or {}).items()}
        default = _checked(
            raw.get("default_price_per_gpu_hour", OPENCOST_DEFAULT), "default_price_per_gpu_hour"
        )
    except PriceError as exc:
        raise PriceError(f"{where}: {exc}") from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise PriceError(f"{where}: bad or missing field: {exc!r}") from None
    return PriceTable(
        currency=str(raw.get("currency", "USD")),
        default_price=default,
        default_source=str(raw.get("default_source", f"default ${default:g}/GPU-h")),
        node_price_label=str(raw.get("node_price_label", PriceTable.node_price_label)),
        pool_label=str(raw.get("pool_label", PriceTable.pool_label)),
        pools=MappingProxyType(pools),
        models=MappingProxyType(models),
    )


def _checked(value: Any, where: str) -> float:
    number = _number(value)
    if number is None:
        raise PriceError(f"{where}: {value!r} is not a non-negative price")
    return number
