"""Online quantile calibration: after each update, rescale every quantile on the newest validated windows.

A quantile forecast that is right on average can still be miscalibrated now: after busy hours, a trough; after
a quiet night, a burst. Conformalised quantile regression puts the coverage back: for each horizon h and level
tau, the factor ``s`` that makes ``tau`` of the newest windows' realised loads fall at or below ``s x q_tau``
(the empirical tau-quantile of ``actual / forecast``), so the P90 under-provisions about 10 % of windows
whatever the load did since training. Refitted every hourly update on that update's calibration hour, the
factors follow the load as it shifts: each update moves them ``calibration_gain`` (a spec key) of the way from
the previous ones to the newest hour's fit (adaptive conformal inference in a damped, per-update form).

Off by default (``calibration_gain: 0``): on the public traces, by rolling-origin evaluation, calibrating on the
newest hour made the P90 pinball loss worse, not better (one hour's windows are few and correlated, and the
next hour is often unlike it; figures in docs/benchmarks.md, "Forecast accuracy"). The fit is still computed
and logged every update (MLflow ``calibration.fit.*``), so its advice can be watched before it is trusted.
Fitting on the pooled windows of the last ``calibration_hours`` hours instead of the newest one, and treating a
fit within ``calibration_dead_band`` as none, measured no better (same section); both stay at their defaults.

The factors are multiplicative because the model's forecasts scale with the load (an additive offset learned
on a busy hour would misplace a quiet one), clipped to ``[e^-LIMIT, e^LIMIT]``, and left as they were where
fewer than ``MIN_WINDOWS`` windows with a positive forecast are at hand. Pure numpy; the Keras side is
:class:`slicewise.forecasting.model.Calibration`.
"""

from __future__ import annotations

import numpy as np

#: Windows with a positive forecast needed per horizon and quantile to trust a factor.
MIN_WINDOWS = 50
#: Factors in use are clipped to [e^-LIMIT, e^LIMIT]: calibration must not scale forecasts by more than ~1.65.
LIMIT = 0.5
#: One hour's fit is clipped to [e^-FIT_LIMIT, e^FIT_LIMIT] (a ratio to a near-zero forecast can be huge).
FIT_LIMIT = 2.0
#: Forecasts at or below this are left out of the fit (a ratio to ~0 says nothing about the scale).
POSITIVE = 1e-4


def fit_log_factors(predicted: np.ndarray, actual: np.ndarray, levels: tuple[float, ...]) -> np.ndarray:
    """(horizons, quantiles) log-factors from ``predicted`` (n, horizons, quantiles) and ``actual``
    (n, horizons), each the log of the ``tau``-quantile of ``actual / predicted`` over the windows whose
    forecast is positive and whose actual is known (0 where too few are)."""
    n_h, n_q = predicted.shape[1], predicted.shape[2]
    out = np.zeros((n_h, n_q))
    for h in range(n_h):
        for j, tau in enumerate(levels):
            forecast, realised = predicted[:, h, j], actual[:, h]
            usable = (forecast > POSITIVE) & np.isfinite(realised) & np.isfinite(forecast)
            if usable.sum() < MIN_WINDOWS:
                continue
            ratio = np.quantile(realised[usable] / forecast[usable], tau, method="inverted_cdf")
            out[h, j] = float(np.clip(np.log(max(ratio, np.exp(-FIT_LIMIT))), -FIT_LIMIT, FIT_LIMIT))
    return out


def update(previous: np.ndarray, fitted: np.ndarray, gain: float, dead_band: float = 0.0) -> np.ndarray:
    """The next log-factors: ``gain`` of the way from ``previous`` to ``fitted`` (the spec's
    ``calibration_gain``), within ``+-LIMIT``; a cell the newest hour could not fit (0 there for lack of
    windows) keeps its previous value. A fit within ``+-dead_band`` (the spec's ``calibration_dead_band``)
    counts as noise: the cell moves towards 0 (identity) instead."""
    target = np.where(np.abs(fitted) <= dead_band, 0.0, fitted)
    moved = previous + gain * (target - previous)
    return np.clip(np.where(fitted == 0.0, previous, moved), -LIMIT, LIMIT)


def apply(predicted: np.ndarray, log_factors: np.ndarray) -> np.ndarray:
    """``predicted`` rescaled, quantiles kept from crossing (a running maximum along the quantile axis)."""
    return np.maximum.accumulate(predicted * np.exp(log_factors)[None, :, :], axis=-1)
