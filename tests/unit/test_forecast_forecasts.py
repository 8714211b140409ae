"""Forecasting's front door for the planner: which predictor to trust, the pending demand, the forecasts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from slicewise.catalog import Catalog, load_catalog
from slicewise.forecasting import forecasts
from slicewise.forecasting.inference import predict_latest
from slicewise.forecasting.spec import load_specs
from slicewise.forecasting.windows import Panel

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def test_a_promoted_or_kept_champion_is_trusted_and_a_winning_baseline_is_not() -> None:
    trusted = forecasts.trust_from_event({"trust": "champion", "champion_version": "4", "reason": "kept"})
    assert (trusted.predictor, trusted.trusted, trusted.version) == ("champion", True, "4")
    baseline = forecasts.trust_from_event(
        {"trust": "mean_last_hour", "baseline": "mean_last_hour", "champion_version": "4", "reason": "worse"}
    )
    assert (baseline.predictor, baseline.trusted) == ("mean_last_hour", False)
    assert "worse" in baseline.why
    # Too little held-out data to score any baseline: the forecaster names none; the planner's fallback acts.
    unscored = forecasts.trust_from_event({"trust": "none", "baseline": "none", "reason": "no windows"})
    assert (unscored.predictor, unscored.trusted) == (forecasts.FALLBACK_BASELINE, False)
    assert "no windows" in unscored.why


@pytest.mark.parametrize(
    ("champion", "age_hours", "tag", "trusted", "why"),
    [
        (None, 1, "model", False, "no champion"),
        ("3", 5, "model", False, "stale"),
        ("3", 1, "p90_last_hour", False, "trusted p90_last_hour"),
        ("3", 1, "champion", True, ""),
    ],
)
def test_the_registry_decides_trust_when_no_fresh_event_is_at_hand(
    champion: str | None, age_hours: float, tag: str, trusted: bool, why: str
) -> None:
    trust = forecasts.trust_from_registry(
        champion, NOW - timedelta(hours=age_hours), tag, NOW, max_age_hours=3
    )
    assert trust.trusted is trusted
    assert why in trust.why


def _panel(load: np.ndarray) -> Panel:
    steps = load.shape[1]
    return Panel(
        keys=[("n1", i, "") for i in range(load.shape[0])],
        timestamps=1_700_000_000 + 60 * np.arange(steps),
        load=load,
        memory=np.full(load.shape, 0.5),
        step_s=60,
    )


def test_a_baseline_forecasts_every_series_with_enough_history() -> None:
    spec = load_specs()[0]
    load = np.full((2, 180), 0.3)
    load[1, :-10] = np.nan  # a new GPU: 10 observed minutes, fewer than min_observed_steps
    predicted = predict_latest(_panel(load), spec, 60, baseline="mean_last_hour")
    assert set(predicted) == {("n1", 0, "")}
    p50, upper, memory = predicted[("n1", 0, "")]
    assert p50 == pytest.approx(0.3)
    assert upper == pytest.approx(0.3)
    assert memory == pytest.approx(0.5)


def test_predict_latest_needs_exactly_one_predictor() -> None:
    spec = load_specs()[0]
    with pytest.raises(ValueError, match="exactly one"):
        predict_latest(_panel(np.zeros((1, 10))), spec, 60)
    with pytest.raises(ValueError, match="horizons"):
        predict_latest(_panel(np.zeros((1, 10))), spec, 45, baseline="last_value")


def test_pending_demand_is_the_p90_of_the_last_hour_per_real_resource_name(catalog: Catalog) -> None:
    end = pd.Timestamp("2026-11-29 12:00", tz="UTC")
    stamps = [end - pd.Timedelta(minutes=m) for m in range(60)]
    rows = []
    for i, ts in enumerate(stamps):
        # 3g requests pending in the 10 most recent minutes only; a scheduled pod never counts.
        if i < 10:
            rows.append((ts, "nvidia_com_mig_3g_40gb", 2.0, True))
        rows.append((ts, "nvidia_com_gpu", 1.0, False))
    frame = pd.DataFrame(rows, columns=["timestamp", "resource", "requested", "unschedulable"])
    (demand,) = forecasts.pending_demand(frame, 60, catalog)
    assert demand.resource == "nvidia.com/mig-3g.40gb"
    assert demand.upper == pytest.approx(2.0)  # 10 of 60 steps at 2 -> P90 = 2
    assert demand.p50 == 0.0
    assert demand.latest == pytest.approx(2.0)  # pending at the last step
    # Pending earlier in the hour only (they started two minutes ago; the scheduled pod's rows go on): nothing
    # pending now.
    started = frame["unschedulable"] & (frame["timestamp"] > end - pd.Timedelta(minutes=2))
    (earlier,) = forecasts.pending_demand(frame[~started], 60, catalog)
    assert earlier.upper == pytest.approx(2.0) and earlier.latest == 0.0


def test_pending_pods_asking_for_several_gpus_are_whole_gpu_demand_counted_once(catalog: Catalog) -> None:
    from slicewise.catalog.resources import WHOLE_GPUS

    end = pd.Timestamp("2026-11-29 12:00", tz="UTC")
    rows = []
    for m in range(60):
        ts = end - pd.Timedelta(minutes=m)
        # A pending pod with two containers of 2 GPUs each (4 whole GPUs) and a pending 1-GPU pod.
        rows += [
            (ts, "ml", "train-0", "a", "nvidia_com_gpu", 2.0, True),
            (ts, "ml", "train-0", "b", "nvidia_com_gpu", 2.0, True),
            (ts, "ml", "notebook", "a", "nvidia_com_gpu", 1.0, True),
        ]
    frame = pd.DataFrame(
        rows, columns=["timestamp", "namespace", "pod", "container", "resource", "requested", "unschedulable"]
    )
    demand = {(d.resource, d.gpus): d.upper for d in forecasts.pending_demand(frame, 60, catalog)}
    # One pod of 4 whole GPUs (not also 4 nvidia.com/gpu requests), and the 1-GPU pod.
    assert demand == {("nvidia.com/gpu", 1): pytest.approx(1.0), (WHOLE_GPUS, 4): pytest.approx(1.0)}


def test_pending_pods_with_a_declared_share_or_a_product_selector_are_requests_of_those_forms(
    catalog: Catalog,
) -> None:
    end = pd.Timestamp("2026-11-29 12:00", tz="UTC")
    rows = []
    for m in range(60):
        ts = end - pd.Timedelta(minutes=m)
        rows += [
            # Two pending pods declaring a quarter of a GPU, one of them on H100s only.
            (ts, "ml", "embed-0", "nvidia_com_gpu", 1.0, True, 0.25, ""),
            (ts, "ml", "embed-1", "nvidia_com_gpu", 1.0, True, 0.25, "NVIDIA-H100-80GB-HBM3"),
            # A plain GPU request, and a pod naming a product the catalogue does not know.
            (ts, "ml", "svc-0", "nvidia_com_gpu", 1.0, True, np.nan, ""),
            (ts, "ml", "odd-0", "nvidia_com_gpu", 1.0, True, np.nan, "Tesla-X9"),
        ]
    columns = ["timestamp", "namespace", "pod", "resource", "requested", "unschedulable"]
    frame = pd.DataFrame(rows, columns=[*columns, "declared_share", "gpu_product"])
    demand = {(d.share, d.models): d.upper for d in forecasts.pending_demand(frame, 60, catalog)}
    assert demand == {
        (0.25, ()): pytest.approx(1.0),
        (0.25, ("H100-80GB",)): pytest.approx(1.0),
        (None, ()): pytest.approx(1.0),
        (None, ("unknown product Tesla-X9",)): pytest.approx(1.0),
    }
    # Partitions written before the form columns existed read as neither.
    old = {(d.share, d.models): d.upper for d in forecasts.pending_demand(frame[columns], 60, catalog)}
    assert old == {(None, ()): pytest.approx(4.0)}


def test_pending_pods_pinned_to_a_sharing_mode_carry_it_as_their_node_selector(catalog: Catalog) -> None:
    from slicewise.cluster.base import REPLICAS_LABEL, SHARING_STRATEGY_LABEL

    end = pd.Timestamp("2026-11-29 12:00", tz="UTC")
    rows = []
    for m in range(60):
        ts = end - pd.Timedelta(minutes=m)
        rows += [
            (ts, "ml", "embed-0", "nvidia_com_gpu", 1.0, True, np.nan, "", "mps", "4"),
            (ts, "ml", "embed-1", "nvidia_com_gpu", 1.0, True, np.nan, "", "mps", "4"),
            (ts, "ml", "svc-0", "nvidia_com_gpu", 1.0, True, np.nan, "", "none", ""),
            (ts, "ml", "svc-1", "nvidia_com_gpu", 1.0, True, np.nan, "", "", ""),
        ]
    columns = ["timestamp", "namespace", "pod", "resource", "requested", "unschedulable"]
    forms = ["declared_share", "gpu_product", "gpu_sharing", "gpu_replicas"]
    frame = pd.DataFrame(rows, columns=[*columns, *forms])
    demand = {d.node_selector: d.upper for d in forecasts.pending_demand(frame, 60, catalog)}
    assert demand == {
        ((REPLICAS_LABEL, ("4",)), (SHARING_STRATEGY_LABEL, ("mps",))): pytest.approx(2.0),
        ((SHARING_STRATEGY_LABEL, ("none",)),): pytest.approx(1.0),
        (): pytest.approx(1.0),
    }
