"""Forecast accuracy: each plan's forecasts against the realised mean load over their horizon."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from slicewise.costs.accuracy import ForecastSet, fleet_series, scored, summarise
from slicewise.forecasting.forecasts import Forecasts, SeriesForecast
from tests.unit.costs.frames import H100, HOUR, gpu_frame, series


def forecasts(predictor: str, p50: float, upper: float) -> Forecasts:
    return Forecasts(
        series=(
            SeriesForecast("w", 0, "", "", p50, upper),
            SeriesForecast("w", 1, "", "", p50, upper),
            SeriesForecast("gone", 0, "", "", p50, upper),  # no data: not scored
        ),
        demand=(),
        predictor=predictor,
        trusted=True,
        horizon_minutes=60,
    )


def load() -> pd.DataFrame:
    """GPU 0 at 0.4 and GPU 1 at 0.8 over 10:00-11:00; 11:00-12:00 both at 0.2 (only half the hour)."""
    return gpu_frame(
        series("w", 0, H100, engine=0.4),
        series("w", 1, H100, engine=0.8),
        series("w", 0, H100, engine=0.2, start=HOUR + timedelta(hours=1), minutes=20),
    )


def test_mae_of_the_p50_and_the_under_provisioning_rate_per_predictor() -> None:
    sets = [
        ForecastSet(
            HOUR + timedelta(minutes=45), forecasts("champion v3", p50=0.5, upper=0.7)
        ),  # origin 10:00
        ForecastSet(HOUR + timedelta(minutes=50), forecasts("p90_last_hour", p50=0.6, upper=0.9)),
        ForecastSet(HOUR + timedelta(hours=1, minutes=45), forecasts("champion v3", p50=0.2, upper=0.3)),
    ]
    points = scored(sets, load()[["timestamp", "hostname", "gpu", "gpu_instance_id", "engine_active"]])
    assert len(points) == 9 and points["realised"].notna().sum() == 4  # 11:00 has 20 of 60 minutes: too few
    summary = summarise(points)
    by = {p["predictor"]: p for p in summary["by_predictor"]}
    champion = by["champion v3"]
    assert champion["count"] == 2 and champion["forecast_sets"] == 2 and champion["without_actuals"] == 4
    assert champion["mae_p50"] == pytest.approx((0.1 + 0.3) / 2)
    assert champion["under_provisioning_rate"] == pytest.approx(0.5)  # GPU 1 at 0.8 > 0.7
    baseline = by["p90_last_hour"]
    assert (
        baseline["mae_p50"] == pytest.approx((0.2 + 0.2) / 2) and baseline["under_provisioning_rate"] == 0.0
    )
    assert summary["champion"]["predictors"] == ["champion v3"]
    assert summary["champion"]["mae_p50"] == pytest.approx(0.2)
    assert summary["forecast_sets"] == 2  # two distinct origins
    plotted = fleet_series(points)
    assert set(plotted["predictor"]) == {"champion v3", "p90_last_hour"}
    assert plotted.loc[plotted["predictor"] == "champion v3", "realised"].iloc[0] == pytest.approx(0.6)


def test_without_forecasts_there_is_nothing_to_score_and_no_champion() -> None:
    summary = summarise(scored([], load()))
    assert summary["by_predictor"] == [] and summary["champion"] is None and summary["forecast_sets"] == 0
