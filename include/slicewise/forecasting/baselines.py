"""Reference forecasts the LSTM must beat, and the target they are all scored against.

Every function reads a *panel*: ``load`` of shape ``(n_series, n_steps)`` on a regular grid of ``step_s``
seconds, NaN where a sample is missing. A baseline returns the point prediction made at every step ``t`` of
the mean load over the next ``horizon_steps`` steps (the target, :func:`future_mean`), using only
``load[:, :t + 1]``; NaN where it has no basis yet. All baselines share one keyword signature so a scoring
loop can call any entry of :data:`BASELINES` the same way, even where a baseline ignores an argument.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

HOUR_S = 3600
DAY_S = 86_400

FloatArray = NDArray[np.float64]


class Baseline(Protocol):
    """A point forecaster: the prediction made at every step of a panel, from the past only."""

    def __call__(self, load: ArrayLike, /, *, step_s: int, horizon_steps: int) -> FloatArray: ...


def future_mean(load: ArrayLike, horizon_steps: int) -> FloatArray:
    """The target: ``target[i, t] = nanmean(load[i, t + 1 : t + 1 + horizon_steps])``.

    NaN where fewer than half of those ``horizon_steps`` samples exist, or where ``t + horizon_steps`` is past
    the last step. Same shape as ``load``.
    """
    panel = _as_panel(load)
    h = _positive("horizon_steps", horizon_steps)
    n_series, n_steps = panel.shape
    sums, counts = _prefix_sums(panel)
    out = np.full((n_series, n_steps), np.nan)
    last = n_steps - h  # the first t whose window runs past the end
    if last <= 0:
        return out
    # Window (t, t + h] is prefix[t + h + 1] - prefix[t + 1].
    window_sum = sums[:, h + 1 :] - sums[:, 1 : last + 1]
    window_count = counts[:, h + 1 :] - counts[:, 1 : last + 1]
    enough = 2 * window_count >= h  # "fewer than half missing" in integers, so odd h needs the majority
    out[:, :last] = np.divide(window_sum, window_count, out=np.full_like(window_sum, np.nan), where=enough)
    return out


def forward_fill(load: ArrayLike) -> FloatArray:
    """Each series' latest non-NaN value up to and including every step; NaN before its first observation."""
    panel = _as_panel(load)
    steps = np.arange(panel.shape[1])
    # The index of the latest observation so far: observed steps carry their own index, gaps -1, and a
    # running maximum carries the last one forward.
    latest = np.maximum.accumulate(np.where(np.isnan(panel), -1, steps), axis=1)
    filled = np.take_along_axis(panel, np.maximum(latest, 0), axis=1)
    filled[latest < 0] = np.nan
    return filled


def last_value(load: ArrayLike, *, step_s: int, horizon_steps: int) -> FloatArray:
    """Persistence: the latest observation up to ``t`` (forward fill); NaN before the first observation."""
    _grid_steps(HOUR_S, step_s)  # validated for a uniform signature; persistence needs no clock
    _positive("horizon_steps", horizon_steps)
    return forward_fill(load)


def mean_last_hour(load: ArrayLike, *, step_s: int, horizon_steps: int) -> FloatArray:
    """Mean of the observations in the hour ending at ``t`` (``3600 / step_s`` steps); NaN if there are none."""
    panel = _as_panel(load)
    hour = _grid_steps(HOUR_S, step_s)
    _positive("horizon_steps", horizon_steps)
    sums, counts = _prefix_sums(panel)
    end = np.arange(1, panel.shape[1] + 1)
    start = np.maximum(end - hour, 0)
    # Differences of prefix sums: exactly 0.0 over an all-idle hour, since adding 0.0 leaves a prefix
    # bit-identical (a rolling sum that adds and removes values can leave 1e-17 there, which sMAPE punishes).
    window_sum = sums[:, end] - sums[:, start]
    window_count = counts[:, end] - counts[:, start]
    return np.divide(window_sum, window_count, out=np.full_like(window_sum, np.nan), where=window_count > 0)


def ewma_last_hour(load: ArrayLike, *, step_s: int, horizon_steps: int) -> FloatArray:
    """Exponentially weighted mean of the observations up to ``t``, span one hour of steps.

    Missing samples are skipped (``ignore_na``): weights decay per observation, not per step, and a gap
    carries the last mean forward. NaN before a series' first observation.
    """
    panel = _as_panel(load)
    hour = _grid_steps(HOUR_S, step_s)
    _positive("horizon_steps", horizon_steps)
    # pandas runs along rows, so the panel goes in transposed: one column per series.
    smoothed = pd.DataFrame(panel.T).ewm(span=hour, ignore_na=True).mean()
    return np.ascontiguousarray(smoothed.to_numpy(dtype=np.float64).T)


def p90_last_hour(load: ArrayLike, *, step_s: int, horizon_steps: int) -> FloatArray:
    """The 0.9 quantile (linear interpolation, as ``np.nanquantile``) of the hour ending at ``t``.

    NaN where that hour has no observation.
    """
    panel = _as_panel(load)
    hour = _grid_steps(HOUR_S, step_s)
    _positive("horizon_steps", horizon_steps)
    # pandas' rolling quantile keeps a sorted window (O(n log w)); np.nanquantile over sliding windows would
    # fall back to a Python loop per window.
    upper = pd.DataFrame(panel.T).rolling(hour, min_periods=1).quantile(0.9, interpolation="linear")
    return np.ascontiguousarray(upper.to_numpy(dtype=np.float64).T)


def seasonal_naive_24h(load: ArrayLike, *, step_s: int, horizon_steps: int) -> FloatArray:
    """The target realised one day earlier: ``future_mean(load, horizon_steps)[i, t - day_steps]``.

    NaN for the first day (no history) and wherever that day-old target is NaN. The day-old target has been
    fully observed by ``t`` only when ``horizon_steps <= day_steps``; for longer horizons it has not, so the
    whole prediction is NaN (no basis) rather than a peek into the future.
    """
    panel = _as_panel(load)
    day = _grid_steps(DAY_S, step_s)
    h = _positive("horizon_steps", horizon_steps)
    out = np.full(panel.shape, np.nan)
    if h > day or panel.shape[1] <= day:
        return out
    out[:, day:] = future_mean(panel, h)[:, :-day]
    return out


def always_zero(load: ArrayLike, *, step_s: int, horizon_steps: int) -> FloatArray:
    """Zero everywhere: the floor any forecaster must beat (and the right answer for an idle GPU)."""
    panel = _as_panel(load)
    _grid_steps(HOUR_S, step_s)
    _positive("horizon_steps", horizon_steps)
    return np.zeros(panel.shape)


BASELINES: dict[str, Baseline] = {
    "last_value": last_value,
    "mean_last_hour": mean_last_hour,
    "ewma_last_hour": ewma_last_hour,
    "p90_last_hour": p90_last_hour,
    "seasonal_naive_24h": seasonal_naive_24h,
    "always_zero": always_zero,
}


def _as_panel(load: ArrayLike) -> FloatArray:
    panel = np.asarray(load, dtype=np.float64)
    if panel.ndim != 2:
        raise ValueError(f"load must be a (n_series, n_steps) panel, got shape {panel.shape}")
    # An infinity would poison every later prefix sum; NaN is the only way to say "missing".
    if np.isinf(panel).any():
        raise ValueError("load holds infinite values; mark missing samples with NaN")
    return panel


def _positive(name: str, value: int) -> int:
    if int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return int(value)


def _grid_steps(span_s: int, step_s: int) -> int:
    """How many steps of ``step_s`` make ``span_s``; the grid must divide it, or "an hour" would be a guess."""
    step = _positive("step_s", step_s)
    if span_s % step:
        raise ValueError(f"step_s={step} does not divide {span_s} s evenly")
    return span_s // step


def _prefix_sums(panel: FloatArray) -> tuple[FloatArray, NDArray[np.int64]]:
    """Running sums and observation counts along time, with a leading 0 column: window (a, b] is ``p[b] - p[a]``.

    ``np.cumsum`` accumulates strictly left to right, so prefix ``k`` depends on ``panel[:, :k]`` alone.
    """
    observed = ~np.isnan(panel)
    n_series, n_steps = panel.shape
    sums = np.zeros((n_series, n_steps + 1))
    counts = np.zeros((n_series, n_steps + 1), dtype=np.int64)
    np.cumsum(np.where(observed, panel, 0.0), axis=1, out=sums[:, 1:])
    np.cumsum(observed, axis=1, out=counts[:, 1:])
    return sums, counts
