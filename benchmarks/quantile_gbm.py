"""A reference row for ``benchmarks/forecast_accuracy.py``: gradient-boosted quantile regression on hand-made
window features (scikit-learn's ``HistGradientBoostingRegressor``, one model per horizon and quantile).

Not a forecaster Slicewise ships (issue 16 keeps the LSTM in production): a yardstick for how much a
different, well-tuned learner gets out of the same windows, fitted afresh before every fold on every window
the LSTM's update trains on (``slicewise.forecasting.backtest.Reference``). Its features are read off
the LSTM's own window inputs (``slicewise.forecasting.windows.FEATURES``), so both see the same history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from slicewise.forecasting.windows import FEATURES, SERIES_FEATURES, Windows

LOAD, OBSERVED, MEAN_HOUR, P90_HOUR, FLEET = (
    FEATURES.index(name) for name in ("load", "observed", "hour_mean", "hour_p90", "fleet_load")
)
#: Boosting settings: shallow trees, many of them, a leaf needs a few dozen windows (the traces are small).
PARAMS = {"max_iter": 300, "learning_rate": 0.05, "max_leaf_nodes": 15, "min_samples_leaf": 40}


def window_features(inputs: np.ndarray) -> np.ndarray:
    """(windows, features) from the model's inputs (windows, steps, FEATURES): recent levels over several
    spans, the hour's mean and P90, peaks, spread, trend, an EWMA, how much of the window was observed, the
    fleet's load now and 15 steps ago, and the clock."""
    load = inputs[:, :, LOAD].astype(np.float64)
    seen = inputs[:, :, OBSERVED].astype(np.float64)

    def observed_mean(values: np.ndarray, steps: slice) -> np.ndarray:
        return (values[:, steps] * seen[:, steps]).sum(axis=1) / np.maximum(seen[:, steps].sum(axis=1), 1.0)

    def last(steps: int) -> slice:
        return slice(-min(steps, load.shape[1]), None)

    ewma = np.zeros(len(load))
    for step in range(load.shape[1]):  # alpha 0.1 over observed steps
        ewma = np.where(seen[:, step] > 0, 0.9 * ewma + 0.1 * load[:, step], ewma)
    half = min(15, load.shape[1] // 2)
    hour_mean = observed_mean(load, last(60))
    columns = [
        load[:, -1],
        seen[:, -1],
        observed_mean(load, last(5)),
        observed_mean(load, last(15)),
        observed_mean(load, last(30)),
        inputs[:, -1, MEAN_HOUR],
        inputs[:, -1, P90_HOUR],
        load.max(axis=1),
        load[:, -15:].max(axis=1),
        np.sqrt(observed_mean((load - hour_mean[:, None]) ** 2, last(60))),
        observed_mean(load, last(half)) - observed_mean(load, slice(-2 * half, -half)),
        ewma,
        seen.mean(axis=1),
        inputs[:, -1, FLEET],
        inputs[:, -min(15, inputs.shape[1]), FLEET],
        *(inputs[:, -1, k] for k in range(SERIES_FEATURES + 1, inputs.shape[2])),  # the clock
    ]
    return np.stack(columns, axis=1)


def gbm_reference(train: Windows, spec: Any, residual: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """Fit one quantile model per (horizon, quantile) of ``spec`` on ``train``; the predictor returns
    (windows, horizons, quantiles), at or above 0 and in quantile order (no crossing). ``residual``: the
    models learn the target less the window's last-hour mean and add it back, so levels no training window
    reached (a trough after busy hours) stay within reach of trees, which cannot extrapolate."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    features = window_features(train.inputs)
    offset = train.inputs[:, -1, MEAN_HOUR].astype(np.float64) if residual else np.zeros(len(features))
    # One OpenMP thread: beside TensorFlow's pools (and another benchmark on 2 cores) libgomp's spinning
    # barriers made a fit that takes seconds alone take minutes.
    with threadpool_limits(limits=1, user_api="openmp"):
        fitted = [
            [
                HistGradientBoostingRegressor(loss="quantile", quantile=q, random_state=0, **PARAMS).fit(
                    features, train.targets[:, h] - offset
                )
                for q in spec.quantiles
            ]
            for h in range(len(spec.horizons_minutes))
        ]

    def predict(inputs: np.ndarray) -> np.ndarray:
        x = window_features(inputs)
        base = inputs[:, -1, MEAN_HOUR].astype(np.float64) if residual else np.zeros(len(x))
        with threadpool_limits(limits=1, user_api="openmp"):
            out = np.stack([np.stack([m.predict(x) + base for m in row], axis=-1) for row in fitted], axis=1)
        return np.maximum.accumulate(np.clip(out, 0.0, None), axis=-1)

    return predict


def gbm_residual_reference(train: Windows, spec: Any) -> Callable[[np.ndarray], np.ndarray]:
    return gbm_reference(train, spec, residual=True)
