"""What one GPU-hour costs: a price table per GPU model, overridable per node (pool) by a label.

The table lives in ``include/config/prices.yaml`` (its comments cite where each number comes from). Every price
carries its source in words, and the report prints it next to the money, so nobody mistakes the $0.95 default
for a quote.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

PRICES_FILE = "prices.yaml"
#: OpenCost's default GPU price, $ per GPU-hour (configs/default.json; facts §6.2).
OPENCOST_DEFAULT = 0.95


class PriceError(ValueError):
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


def load_prices(path: Path | None = None) -> PriceTable:
    """The price table of ``path`` (default ``include/config/prices.yaml``); PriceError when malformed."""
    if path is None:
        from slicewise.settings import CONFIG_DIR

        path = CONFIG_DIR / PRICES_FILE
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise PriceError(f"{path}: expected a mapping")
    try:
        models = {
            str(name): Price(_checked(spec["price_per_gpu_hour"], f"models.{name}"), str(spec["source"]))
            for name, spec in (raw.get("models") or {}).items()
        }
        pools = {str(k): _checked(v, f"pools.{k}") for k, v in (raw.get("pools") or {}).items()}
        default = _checked(
            raw.get("default_price_per_gpu_hour", OPENCOST_DEFAULT), "default_price_per_gpu_hour"
        )
    except (KeyError, TypeError) as exc:
        raise PriceError(f"{path}: bad or missing field: {exc!r}") from None
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
