"""Forecast the next horizon for every series with the trusted predictor (the champion or a baseline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from slicewise.forecasting.baselines import BASELINES
from slicewise.forecasting.windows import Panel, make_windows

if TYPE_CHECKING:
    from slicewise.forecasting.spec import ForecasterSpec

#: (hostname, gpu, gpu_instance_id) -> (P50, upper quantile, memory share P90 of the last hour)
SeriesPrediction = dict[tuple[str, int, str], tuple[float, float, float]]


def _horizon_index(spec: ForecasterSpec, horizon_minutes: int) -> int:
    if horizon_minutes not in spec.horizons_minutes:
        raise ValueError(f"{spec.name} has horizons {spec.horizons_minutes}, not {horizon_minutes} min")
    return spec.horizons_minutes.index(horizon_minutes)


def _recent_memory(panel: Panel) -> np.ndarray:
    recent = panel.memory[:, -panel.hour_steps() :]
    out = np.full(len(panel.keys), np.nan)
    has = ~np.isnan(recent).all(axis=1) if recent.size else np.zeros(len(panel.keys), bool)
    if has.any():
        out[has] = np.nanpercentile(recent[has], 90, axis=1)
    return out


def predict_latest(
    panel: Panel,
    spec: ForecasterSpec,
    horizon_minutes: int,
    *,
    model: Callable[[np.ndarray], np.ndarray] | None = None,
    baseline: str | None = None,
) -> SeriesPrediction:
    """Forecast made at the panel's last step, per series, by ``model`` (a Keras predict function returning
    (n, horizons, quantiles)) or by the named ``baseline`` (its point forecast is P50 and upper alike).

    Series without enough observed history in their window (``spec.min_observed_steps``) are left out."""
    if (model is None) == (baseline is None):
        raise ValueError("give exactly one of model or baseline")
    n_series, n_steps = panel.load.shape
    if n_steps == 0:
        return {}
    h = _horizon_index(spec, horizon_minutes)
    memory = _recent_memory(panel)
    out: SeriesPrediction = {}
    if model is not None:
        windows = make_windows(panel, spec, first_step=n_steps - 1, require_targets=False)
        if not len(windows.inputs):
            return {}
        predicted = model(windows.inputs)
        q50 = int(np.argmin([abs(q - 0.5) for q in spec.quantiles]))
        qup = spec.quantiles.index(spec.upper_quantile)
        for i, row in enumerate(windows.series.tolist()):
            p50, upper = float(predicted[i, h, q50]), float(predicted[i, h, qup])
            out[panel.keys[row]] = (min(1.0, max(0.0, p50)), min(1.0, max(0.0, upper)), float(memory[row]))
        return out
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; known: {', '.join(BASELINES)}")
    point = BASELINES[baseline](panel.load, step_s=panel.step_s, horizon_steps=spec.horizon_steps()[h])[:, -1]
    observed = (~np.isnan(panel.load[:, -spec.window_steps :])).sum(axis=1)
    for row in range(n_series):
        if observed[row] >= spec.min_observed_steps and np.isfinite(point[row]):
            value = float(min(1.0, max(0.0, point[row])))
            out[panel.keys[row]] = (value, value, float(memory[row]))
    return out
