"""How good the forecasts the planner acted on were: each ``plans/<run>/forecasts.json`` against what happened.

A forecast set is made from the newest validated hour, which ends at the top of the hour before the plan
(the ingest publishes each hour a few minutes after it ends), so its **origin** is the plan's time floored to
the hour and each series' target is its mean engine activity over ``[origin, origin + horizon_minutes)``. The
realised mean comes from the validated partitions; a series with fewer than half of that window's samples is
left out (counted as ``without_actuals``). Per predictor (``champion vN`` or a baseline's name): the MAE of the
P50, the P90 under-provisioning rate (share of series whose realised load exceeded the upper forecast) and
the number of series-forecasts scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise.forecasting.forecasts import Forecasts

if TYPE_CHECKING:
    import pandas as pd

METHOD = (
    "each plan's forecasts (plans/<run>/forecasts.json) vs the realised mean engine activity per GPU / MIG "
    "instance over [origin, origin + horizon), origin = the plan's time floored to the hour (the end of the "
    "newest validated hour it was made from); MAE of the P50 and the share of series whose realised load "
    "exceeded the upper (P90) forecast"
)
MIN_COVERAGE = 0.5
SERIES = ("hostname", "gpu", "gpu_instance_id")


@dataclass(frozen=True)
class ForecastSet:
    made_at: datetime
    forecasts: Forecasts

    @property
    def origin(self) -> datetime:
        return self.made_at.replace(minute=0, second=0, microsecond=0)

    @property
    def target_end(self) -> datetime:
        return self.origin + timedelta(minutes=self.forecasts.horizon_minutes)


def scored(sets: Sequence[ForecastSet], load: pd.DataFrame, step_s: int = 60) -> pd.DataFrame:
    """One row per (forecast set, series) with its P50, upper and realised mean (NaN without enough data).

    ``load``: GPU-frame columns ``timestamp``, ``hostname``, ``gpu``, ``gpu_instance_id``, ``engine_active``.
    """
    import pandas as pd

    out = []
    for fs in sets:
        if not fs.forecasts.series:
            continue
        origin, end = pd.Timestamp(fs.origin), pd.Timestamp(fs.target_end)
        window = load[(load["timestamp"] >= origin) & (load["timestamp"] < end)]
        expected = fs.forecasts.horizon_minutes * 60 / step_s
        stats = window.groupby(list(SERIES))["engine_active"].agg(["mean", "count"])
        means: dict[Any, Any] = stats["mean"].to_dict()
        counts: dict[Any, Any] = stats["count"].to_dict()
        for s in fs.forecasts.series:
            key = (s.hostname, s.gpu, s.gpu_instance_id)
            enough = float(counts.get(key, 0)) >= MIN_COVERAGE * expected
            realised = float(means[key]) if enough else float("nan")
            out.append(
                {
                    "origin": origin,
                    "predictor": fs.forecasts.predictor,
                    "horizon_minutes": fs.forecasts.horizon_minutes,
                    "hostname": s.hostname,
                    "gpu": s.gpu,
                    "gpu_instance_id": s.gpu_instance_id,
                    "p50": s.p50,
                    "upper": s.upper,
                    "realised": realised,
                }
            )
    columns = ["origin", "predictor", "horizon_minutes", *SERIES, "p50", "upper", "realised"]
    return pd.DataFrame(out, columns=columns)


def summarise(points: pd.DataFrame) -> dict[str, Any]:
    """Per predictor: forecast sets, series-forecasts scored, MAE of the P50, P90 under-provisioning rate."""
    by_predictor: list[dict[str, Any]] = []
    if not points.empty:
        for predictor, group in points.groupby("predictor", sort=True):
            known = group[group["realised"].notna()]
            by_predictor.append(
                {
                    "predictor": str(predictor),
                    "forecast_sets": int(group["origin"].nunique()),
                    "count": len(known),
                    "without_actuals": int(len(group) - len(known)),
                    "horizon_minutes": sorted(int(h) for h in group["horizon_minutes"].unique()),
                    "mae_p50": float((known["p50"] - known["realised"]).abs().mean()) if len(known) else None,
                    "under_provisioning_rate": (
                        float((known["realised"] > known["upper"]).mean()) if len(known) else None
                    ),
                }
            )
    champions = [p for p in by_predictor if p["predictor"].startswith("champion")]
    champion = None
    if champions:
        scored_ = [c for c in champions if c["count"]]
        count = sum(c["count"] for c in scored_)
        champion = {
            "predictors": [c["predictor"] for c in champions],
            "count": count,
            "mae_p50": (sum(c["mae_p50"] * c["count"] for c in scored_) / count) if count else None,
            "under_provisioning_rate": (
                sum(c["under_provisioning_rate"] * c["count"] for c in scored_) / count if count else None
            ),
        }
    return {
        "method": METHOD,
        "forecast_sets": int(points["origin"].nunique()) if not points.empty else 0,
        "champion": champion,
        "by_predictor": by_predictor,
    }


def fleet_series(points: pd.DataFrame) -> pd.DataFrame:
    """Per forecast origin and predictor: the fleet's mean P50, upper and realised load (for the plot)."""
    known = points[points["realised"].notna()]
    if known.empty:
        return known
    return known.groupby(["origin", "predictor"], as_index=False)[["p50", "upper", "realised"]].mean()
