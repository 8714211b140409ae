"""Prices: the node's label, its pool, its model, else OpenCost's $0.95 — always with the source in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from slicewise.costs import allocation
from slicewise.costs.pricing import OPENCOST_DEFAULT, Price, PriceError, PriceTable, load_prices
from slicewise.costs.samples import hour_samples
from slicewise.costs.sharing import LayoutHistory
from tests.unit.costs.frames import (
    A30,
    CATALOG,
    HOUR,
    NO_HISTORY,
    PRICES,
    demand_frame,
    gpu_frame,
    observed_at,
    one,
    series,
)

TABLE = PriceTable(pools={"spot": 1.5}, models={"H100-80GB": Price(6.88, "AWS p5")})


def test_the_node_label_beats_the_pool_which_beats_the_model_which_beats_the_default() -> None:
    label = TABLE.price_for(
        "H100-80GB", {"slicewise.io/price-per-gpu-hour": "2.25", "slicewise.io/node-pool": "spot"}
    )
    assert label == Price(2.25, "node label slicewise.io/price-per-gpu-hour=2.25")
    pool = TABLE.price_for("H100-80GB", {"slicewise.io/node-pool": "spot"})
    assert pool.per_gpu_hour == 1.5 and "pool" in pool.source
    assert TABLE.price_for("H100-80GB", {"slicewise.io/node-pool": "other"}) == Price(6.88, "AWS p5")
    fallback = TABLE.price_for("A30-24GB")
    assert fallback.per_gpu_hour == OPENCOST_DEFAULT == 0.95
    assert "default" in fallback.source and "A30-24GB" in fallback.source


def test_a_price_label_that_is_not_a_price_is_ignored_and_the_source_says_so() -> None:
    price = TABLE.price_for("H100-80GB", {"slicewise.io/price-per-gpu-hour": "cheap"})
    assert price.per_gpu_hour == 6.88
    assert "'cheap' is not a price, ignored" in price.source


def test_the_shipped_table_prices_every_mig_model_but_the_a30_and_cites_a_source() -> None:
    shipped = load_prices()
    assert shipped.currency == "USD" and shipped.default_price == 0.95
    # Models without MIG have no cited price yet: they take the default, and the report says so.
    assert set(shipped.models) == {m.name for m in CATALOG.models.values() if m.mig} - {"A30-24GB"}
    for price in shipped.models.values():
        assert price.per_gpu_hour > 0 and "on-demand" in price.source


def test_a_malformed_table_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text("models:\n  H100-80GB: {price_per_gpu_hour: -1, source: x}\n")
    with pytest.raises(PriceError, match=r"models.H100-80GB.*not a non-negative price"):
        load_prices(bad)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, r"no such file"),
        ("models: [unclosed\n", r"not valid YAML at line 2, column 1"),
        (
            "models:\n  A100_80GB: {price_per_gpu_hour: 3.4, source: x}\n",
            r"models.A100_80GB names no catalogue GPU",
        ),
        ("models:\n  H100-80GB: {price_per_gpu_hour: 3.4}\n", r"bad or missing field: KeyError\('source'\)"),
        ("- just\n- a list\n", r"expected a mapping"),
    ],
    ids=["missing", "not YAML", "unknown model", "no source", "not a mapping"],
)
def test_a_bad_price_file_names_the_setting_and_the_file(
    tmp_path: Path, content: str | None, words: str
) -> None:
    path = tmp_path / "prices.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(PriceError, match=rf"^price file {path} \(setting cost_prices_file\): .*{words}"):
        load_prices(path)


def test_a_gpu_without_a_price_falls_back_to_the_default_in_the_rows_and_a_node_label_overrides() -> None:
    gpu = gpu_frame(
        series("a30", 0, A30, namespace="ns", pod="p", engine=0.5),
        series("odd", 0, "NVIDIA Mystery GPU", namespace="ns", pod="q", engine=0.5),
        series("labelled", 0, A30, namespace="ns", pod="r", engine=0.5),
    )
    history = LayoutHistory.of(
        observed_at(HOUR, "labelled", "default", {"slicewise.io/price-per-gpu-hour": "1.1"})
    )
    samples = hour_samples(gpu, demand_frame(), catalog=CATALOG, history=history)
    rows = allocation.allocation_rows(samples, prices=PRICES, history=history)
    a30 = one(rows, pod="p")
    assert a30["price_per_gpu_hour"] == 0.95 and a30["gpuCost"] == pytest.approx(0.95)
    assert "OpenCost" in a30["price_source"] and "A30-24GB" in a30["price_source"]
    mystery = one(rows, pod="q")
    assert mystery["gpu_model"] == "NVIDIA Mystery GPU" and mystery["price_per_gpu_hour"] == 0.95
    assert one(rows, pod="r")["price_per_gpu_hour"] == 1.1
    unlabelled = allocation.allocation_rows(samples, prices=PRICES, history=NO_HISTORY)
    assert one(unlabelled, pod="r")["price_per_gpu_hour"] == 0.95
