"""Forecast error metrics over arrays of any matching shape.

Every metric ignores positions where either side is NaN (a missing target, or a baseline with no basis yet)
and returns NaN when no position is left, so an empty comparison never reads as a perfect score. Loads are
not assumed to lie in 0-1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from slicewise.forecasting.baselines import forward_fill, future_mean

FloatArray = NDArray[np.float64]


def mae(actual: ArrayLike, predicted: ArrayLike) -> float:
    """Mean absolute error."""
    a, p = _paired(actual, predicted)
    return _mean(np.abs(a - p))


def smape(actual: ArrayLike, predicted: ArrayLike) -> float:
    """Symmetric MAPE on a 0-2 scale: the mean of ``2|a - p| / (|a| + |p|)``.

    A position where both are exactly 0 counts as 0 (a correctly predicted idle GPU), not as 0/0. Any other
    prediction of a zero actual costs the maximum 2, however close it is.
    """
    a, p = _paired(actual, predicted)
    scale = np.abs(a) + np.abs(p)
    terms = np.divide(2.0 * np.abs(a - p), scale, out=np.zeros_like(scale), where=scale > 0)
    return _mean(terms)


def mase(actual: ArrayLike, predicted: ArrayLike, naive_mae: float) -> float:
    """MAE scaled by the naive forecast's in-sample MAE (see :func:`naive_mae`): below 1 beats persistence.

    NaN when ``naive_mae`` is 0, negative or not finite (no meaningful scale).
    """
    scale = float(naive_mae)
    if not (math.isfinite(scale) and scale > 0):
        return math.nan
    return mae(actual, predicted) / scale


def naive_mae(load: ArrayLike, horizon_steps: int) -> float:
    """The MASE scale: MAE of persistence (``last_value``) predicting ``future_mean`` on this panel.

    Compute it on the training panel and pass it to :func:`mase` / :func:`score` for every evaluation.
    """
    # last_value is forward_fill; the grid spacing plays no part in persistence, so call it directly.
    return mae(future_mean(load, horizon_steps), forward_fill(load))


def pinball(actual: ArrayLike, predicted: ArrayLike, quantile: float) -> float:
    """Mean quantile (pinball) loss: ``max(q (a - p), (q - 1)(a - p))``.

    At ``q = 0.9`` an under-prediction costs 9 times an over-prediction of the same size; at 0.5 it is half
    the absolute error.
    """
    q = _quantile(quantile)
    a, p = _paired(actual, predicted)
    diff = a - p
    return _mean(np.maximum(q * diff, (q - 1.0) * diff))


def under_provision_rate(actual: ArrayLike, upper: ArrayLike) -> float:
    """Share of windows whose realised mean load exceeds the upper-quantile prediction (equal is covered).

    For a well calibrated P90 this is about 0.1.
    """
    a, u = _paired(actual, upper)
    return _mean((a > u).astype(np.float64))


def score(
    actual: ArrayLike,
    quantile_predictions: Mapping[float, ArrayLike],
    *,
    naive_mae: float,
    upper_quantile: float = 0.9,
) -> dict[str, float]:
    """All metrics of one forecaster on one set of windows.

    ``quantile_predictions`` maps each quantile to its prediction, and must hold 0.5 (for ``mae``, ``smape``,
    ``mase``) and ``upper_quantile``. A point forecaster (a baseline) is scored by passing its one array for
    every quantile, e.g. ``{0.5: pred, 0.9: pred}``: its pinball losses and under-provision rate then say how
    it fares when used as a P50 and as a P90.

    Returns ``mae``, ``smape``, ``mase``, one ``pinball_p<percent>`` per quantile given (``pinball_p50``,
    ``pinball_p90``, ...), ``under_provision_rate_p<percent of upper_quantile>`` and ``n``. Every metric is
    computed over the same windows: those where the actual and every quantile prediction are present; ``n``
    counts them.
    """
    target = np.asarray(actual, dtype=np.float64)
    predictions = {_quantile(q): np.asarray(p, dtype=np.float64) for q, p in quantile_predictions.items()}
    upper = _quantile(upper_quantile)
    for needed in (0.5, upper):
        if needed not in predictions:
            raise ValueError(f"quantile_predictions has no {needed} quantile (got {sorted(predictions)})")
    for q, p in predictions.items():
        _check_shapes(target, p, f"the {q} prediction")

    # One mask for all metrics, so pinball_p90 and mae never silently describe different windows.
    present = ~np.isnan(target)
    for p in predictions.values():
        present &= ~np.isnan(p)
    target = np.where(present, target, np.nan)

    median = predictions[0.5]
    result: dict[str, float] = {
        "mae": mae(target, median),
        "smape": smape(target, median),
        "mase": mase(target, median, naive_mae),
    }
    for q in sorted(predictions):
        name = f"pinball_p{_percent(q)}"
        if name in result:
            raise ValueError(f"two quantiles are both named {name}")
        result[name] = pinball(target, predictions[q], q)
    result[f"under_provision_rate_p{_percent(upper)}"] = under_provision_rate(target, predictions[upper])
    result["n"] = float(np.count_nonzero(present))
    return result


def _paired(actual: ArrayLike, predicted: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The flattened values where both sides are present."""
    a = np.asarray(actual, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    _check_shapes(a, p, "predicted")
    present = ~(np.isnan(a) | np.isnan(p))
    return a[present], p[present]


def _check_shapes(actual: FloatArray, other: FloatArray, name: str) -> None:
    # No broadcasting: a (n_series,) array against a panel is a bug, not a comparison.
    if actual.shape != other.shape:
        raise ValueError(f"{name} has shape {other.shape}, actual has {actual.shape}")


def _mean(values: FloatArray) -> float:
    return float(values.mean()) if values.size else math.nan


def _quantile(quantile: float) -> float:
    q = float(quantile)
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must lie strictly between 0 and 1, got {quantile!r}")
    return q


def _percent(quantile: float) -> int:
    """The whole percentile naming a quantile (0.9 -> 90); rounded, since ``int(0.29 * 100)`` is 28."""
    percent = round(quantile * 100)
    if not math.isclose(percent, quantile * 100, abs_tol=1e-9):
        raise ValueError(f"quantile {quantile} is not a whole percentile, so it has no metric name")
    return percent
