"""Online expert weighting: combine the model's quantiles with the baselines' forecasts, per quantile.

Each *expert* (the LSTM, every baseline) offers a forecast for each quantile level tau: the LSTM its tau
quantile, a baseline its one point forecast. The combined tau forecast is a convex combination of the experts',
weighted by how they fared on windows whose targets are already known (never the windows being scored):

- ``hedge`` (exponentially weighted average): ``w_k ∝ exp(-eta * L_k / mean(L))``, with ``L_k`` expert k's
  mean pinball loss at tau over those windows. Dividing by the experts' mean loss makes ``eta`` scale-free (a
  trough and a busy hour get equally sharp weights); ``eta`` 0 is the plain average, a large ``eta`` the leader.
- ``leader`` (follow the leader): all weight on the expert with the lowest ``L_k``.
- ``model``: all weight on the model, so that a recalibration (below) corrects the model's own quantiles.

An expert with no forecast on any known window (a seasonal baseline with less than a day of history) gets no
weight; on a window where a weighted expert has no forecast, the others' weights are renormalised.

A rule may also *recalibrate* the mix (``recalibrate``): a convex combination of quantiles need not cover as
its level says (mixing the LSTM's P90 with point forecasts pulls it down), so after the weights, each quantile
of the mix is corrected on the same known windows, as the mix (those weights) would have forecast them:

- ``shift`` (split conformal, additive): add the ``tau``-quantile of ``actual - mix``, the constant that makes
  ``tau`` of the known windows fall at or below the mix (and the one that minimises their pinball loss);
  the result is kept at or above 0 (a load is never negative).
- ``scale`` (multiplicative, as :mod:`slicewise.forecasting.calibration` does for the model): multiply by the
  ``tau``-quantile of ``actual / mix`` (:func:`~slicewise.forecasting.calibration.fit_log_factors`), clipped
  to the calibration's ``[e^-LIMIT, e^LIMIT]``.

Either is left out (no correction) where fewer than ``calibration.MIN_WINDOWS`` known windows are usable, or
where they span less than the rule's ``min_hours`` (one hour of windows is many windows but one regime).

A rule with a ``trend`` band fits that correction per *turn* of the fleet's load (Mondrian conformal: each
window is corrected by the known windows of its own kind): a window whose fleet load over its last quarter hour
is ``trend`` or more below its mean over the last hour is a ``fall``, as far above it a ``rise``, else
``neither`` (:func:`fleet_trend`, :func:`turns`); with ``trend_span`` ``hour``, its last hour against the hour
before. A forecaster that lags the load errs one way in falls and the other in rises, which one correction for
all windows averages away. A turn with fewer than ``calibration.MIN_WINDOWS`` known windows takes the correction
fitted on all of them (one with enough windows but too few usable, as :func:`corrections` counts them, gets
none). Measured on GenAI's hourly folds, neither span gained (docs/benchmarks.md).

Pure numpy; :func:`slicewise.forecasting.backtest.run_backtest` scores the result as ``lstm_<rule>`` rows, and
``benchmarks/forecast_accuracy.py --expert-weights`` prints them (figures in docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slicewise.forecasting import calibration
from slicewise.forecasting.windows import FEATURES

#: The experts a model's expert mix (``spec.expert_mix``, :class:`slicewise.forecasting.model.ExpertMix`)
#: weighs: the calibrated model, then the window's simple forecasts as the model's anchors read them (the
#: ``WindowAnchors`` columns last value, the last hour's mean, EWMA and P90), and zero.
MIX_EXPERTS = ("model", "last_value", "mean_last_hour", "ewma_last_hour", "p90_last_hour", "always_zero")
HEDGE = "hedge"
LEADER = "leader"
MODEL = "model"
#: The turns of the fleet's load a ``trend`` rule corrects apart, in the order of :func:`turns`' values.
TURNS = ("fall", "neither", "rise")
#: What a window's trend compares (:func:`fleet_trend`): its last quarter hour with its last hour, or its last
#: hour with the hour before.
TREND_SPANS = ("quarter", "hour")
#: Recalibration of the mix: none, an additive conformal shift, or a multiplicative factor.
NONE = "none"
SHIFT = "shift"
SCALE = "scale"


@dataclass(frozen=True)
class ExpertRule:
    """How the weights are fitted: ``kind`` (``hedge``, ``leader`` or ``model``), ``eta`` (hedge only), and
    ``hours`` of known windows before the cut they are fitted on (0: every known window so far); ``recalibrate``
    (``none``, ``shift`` or ``scale``): how the mix is then corrected on those windows, and only once they span
    at least ``min_hours`` hours; ``trend`` > 0: that correction fitted per turn of the fleet's load (a band,
    see the module's docstring; a recalibration needed) over ``trend_span`` (one of :data:`TREND_SPANS`)."""

    kind: str
    eta: float = 0.0
    hours: float = 1.0
    recalibrate: str = NONE
    min_hours: float = 0.0
    trend: float = 0.0
    trend_span: str = TREND_SPANS[0]

    def __post_init__(self) -> None:
        if self.kind not in (HEDGE, LEADER, MODEL):
            raise ValueError(f"kind must be {HEDGE!r}, {LEADER!r} or {MODEL!r}, got {self.kind!r}")
        if self.eta < 0 or self.hours < 0 or self.min_hours < 0 or self.trend < 0:
            raise ValueError(
                f"eta, hours, min_hours and trend must not be negative, got {self.eta!r}, {self.hours!r}, "
                f"{self.min_hours!r}, {self.trend!r}"
            )
        if self.recalibrate not in (NONE, SHIFT, SCALE):
            raise ValueError(
                f"recalibrate must be {NONE!r}, {SHIFT!r} or {SCALE!r}, got {self.recalibrate!r}"
            )
        if self.trend_span not in TREND_SPANS:
            raise ValueError(f"trend_span must be one of {', '.join(TREND_SPANS)}, got {self.trend_span!r}")
        if self.trend > 0 and self.recalibrate == NONE:
            raise ValueError("a trend band needs a recalibration (shift or scale) to fit per turn")

    @property
    def name(self) -> str:
        span = "all" if self.hours == 0 else f"{self.hours:g}h"
        base = f"lstm_hedge{self.eta:g}_{span}" if self.kind == HEDGE else f"lstm_{self.kind}_{span}"
        if self.recalibrate == NONE:
            return base
        return (
            f"{base}_{self.recalibrate}"
            + (f"_min{self.min_hours:g}h" if self.min_hours > 0 else "")
            + (
                f"_{self.trend_span if self.trend_span != TREND_SPANS[0] else ''}trend{self.trend:g}"
                if self.trend > 0
                else ""
            )
        )


def known_before(step: np.ndarray, cut: int, horizon_steps: int, span_steps: int = 0) -> np.ndarray:
    """Mask of the windows (by their last input ``step``) whose target is known before ``cut``: its last step,
    ``step + horizon_steps``, lies before the cut; with ``span_steps`` > 0, only those of the last
    ``span_steps`` steps of such windows."""
    newest = cut - horizon_steps
    mask = step < newest
    return mask & (step >= newest - span_steps) if span_steps > 0 else mask


def fleet_trend(inputs: np.ndarray, hour_steps: int, span: str = TREND_SPANS[0]) -> np.ndarray:
    """(n,) per window of ``inputs`` (n, window_steps, features): the fleet's mean load over its last quarter
    hour over that over its last hour (``quarter``; the hour capped at the window), or over its last hour over
    that over the hour before it (``hour``; that hour capped at what the window holds before the last one).
    NaN where the reference's mean is not positive (an idle fleet has no turn) or there is none."""
    fleet = inputs[:, :, FEATURES.index("fleet_load")].astype(np.float64)
    width = fleet.shape[1]
    if span == TREND_SPANS[0]:
        recent, reference = fleet[:, -max(1, hour_steps // 4) :], fleet[:, -max(1, min(hour_steps, width)) :]
    else:
        last = max(1, min(hour_steps, width))
        recent, reference = fleet[:, -last:], fleet[:, max(0, width - 2 * last) : width - last]
    if not len(fleet) or not reference.shape[1]:
        return np.full(len(fleet), np.nan)
    before = reference.mean(axis=1)
    return np.divide(recent.mean(axis=1), before, out=np.full(len(fleet), np.nan), where=before > 0)


def turns(trend: np.ndarray, band: float) -> np.ndarray:
    """(n,) index into :data:`TURNS` of each window's ``trend`` (from :func:`fleet_trend`): 0 (fall) at or
    below ``1 - band``, 2 (rise) at or above ``1 + band``, else 1 (neither, NaN included)."""
    out = np.ones(len(trend), dtype=np.int64)
    out[trend <= 1 - band] = 0
    out[trend >= 1 + band] = 2
    return out


def pinball_losses(actual: np.ndarray, forecasts: np.ndarray, tau: float) -> np.ndarray:
    """(experts,) mean pinball loss at ``tau`` of ``forecasts`` (n, experts) against ``actual`` (n,), each
    over the windows where both are known; NaN for an expert with none."""
    diff = actual[:, None] - forecasts
    loss = np.maximum(tau * diff, (tau - 1.0) * diff)
    known = np.isfinite(loss)
    counts = known.sum(axis=0)
    sums = np.where(known, loss, 0.0).sum(axis=0)
    return np.divide(sums, counts, out=np.full(forecasts.shape[1], np.nan), where=counts > 0)


def carried_losses(
    previous: np.ndarray,
    previous_windows: np.ndarray,
    newest: np.ndarray,
    newest_windows: np.ndarray,
    memory: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Pool the newest hour's mean losses (``newest``, over ``newest_windows`` windows) with those carried from
    earlier updates (``previous``, ``previous_windows``): each earlier window counts ``memory`` times as much as
    one of the newest hour (0: the newest hour only; 1: every hour alike, online Hedge on all windows so far).
    NaN (no windows) on one side leaves the other; returns the pooled means and their (discounted) windows."""
    old = memory * np.where(np.isfinite(previous), previous_windows, 0.0)
    new = np.where(np.isfinite(newest), newest_windows, 0.0)
    total = old + new
    summed = old * np.nan_to_num(previous) + new * np.nan_to_num(newest)
    return np.divide(summed, total, out=np.full(np.shape(total), np.nan), where=total > 0), total


def weights(losses: np.ndarray, rule: ExpertRule) -> np.ndarray:
    """(experts,) non-negative weights summing to 1 from the experts' mean losses (NaN: no weight); all zero
    where no expert has a loss."""
    known = np.isfinite(losses)
    out = np.zeros(losses.shape)
    if not known.any():
        return out
    if rule.kind == MODEL:
        out[0] = 1.0 if known[0] else 0.0
        return out
    if rule.kind == LEADER:
        out[np.flatnonzero(known)[np.argmin(losses[known])]] = 1.0
        return out
    scale = float(losses[known].mean())
    scaled = losses[known] / scale if scale > 0 else np.zeros(int(known.sum()))
    raw = np.exp(-rule.eta * (scaled - scaled.min()))  # shifted by the minimum: no underflow for large eta
    out[known] = raw / raw.sum()
    return out


def combine(forecasts: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """(n,) the weighted mean of ``forecasts`` (n, experts) per window, over the experts with a forecast there
    (weights renormalised); NaN where no weighted expert has one."""
    present = np.isfinite(forecasts) & (weight > 0)[None, :]
    mass = np.where(present, weight[None, :], 0.0)
    total = mass.sum(axis=1)
    summed = (mass * np.where(present, forecasts, 0.0)).sum(axis=1)
    return np.divide(summed, total, out=np.full(len(forecasts), np.nan), where=total > 0)


def corrections(
    actual: np.ndarray,
    mix: np.ndarray,
    levels: tuple[float, ...],
    mode: str,
    min_windows: int = calibration.MIN_WINDOWS,
) -> np.ndarray:
    """(quantiles,) the correction of each quantile of ``mix`` (m, quantiles), fitted against ``actual`` (m,)
    on the windows where both are known: ``shift``, the ``tau``-quantile of ``actual - mix``; ``scale``, the
    log of the ``tau``-quantile of ``actual / mix`` over the windows with a positive mix, within
    ``+-calibration.LIMIT``. 0 (none) where fewer than ``min_windows`` windows are usable, or for ``none``."""
    out = np.zeros(len(levels))
    if mode == NONE:
        return out
    for j, tau in enumerate(levels):
        forecast = mix[:, j]
        usable = np.isfinite(actual) & np.isfinite(forecast)
        if mode == SCALE:
            usable &= forecast > calibration.POSITIVE
        if usable.sum() < max(1, min_windows):
            continue
        if mode == SHIFT:
            out[j] = float(np.quantile(actual[usable] - forecast[usable], tau, method="inverted_cdf"))
        else:
            ratio = float(np.quantile(actual[usable] / forecast[usable], tau, method="inverted_cdf"))
            log = np.log(max(ratio, np.exp(-calibration.LIMIT)))
            out[j] = float(np.clip(log, -calibration.LIMIT, calibration.LIMIT))
    return out


def recalibrated(mix: np.ndarray, correction: np.ndarray, mode: str) -> np.ndarray:
    """``mix`` (n, quantiles) with ``correction`` (quantiles,) from :func:`corrections` applied: added and kept
    at or above 0 (``shift``), or as a factor ``e^correction`` (``scale``); quantiles kept from crossing."""
    if mode == SHIFT:
        out = np.fmax(mix + correction[None, :], 0.0)
    elif mode == SCALE:
        out = mix * np.exp(correction)[None, :]
    else:
        out = mix
    return np.fmax.accumulate(out, axis=1)


def combined_quantiles(
    history_actual: np.ndarray,
    history: np.ndarray,
    scored: np.ndarray,
    levels: tuple[float, ...],
    rule: ExpertRule,
    history_hours: float = np.inf,
    history_trend: np.ndarray | None = None,
    scored_trend: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit the weights per quantile on ``history`` (m, quantiles, experts) against ``history_actual`` (m,) and
    apply them to ``scored`` (n, quantiles, experts); with ``rule.recalibrate``, and a history spanning
    ``history_hours`` of at least ``rule.min_hours``, correct the mix by :func:`corrections` fitted on the
    history as the mix forecast it; with ``rule.trend``, per turn (:func:`turn_corrections`) of the windows'
    :func:`fleet_trend` (``history_trend`` (m,), ``scored_trend`` (n,), both needed). Returns the (n,
    quantiles) forecasts, kept from crossing by a running maximum along the quantile axis, the (quantiles,
    experts) weights and the corrections: (quantiles,), or (turns, quantiles) with a trend (0 without
    recalibration)."""
    fitted = np.stack(
        [weights(pinball_losses(history_actual, history[:, j], tau), rule) for j, tau in enumerate(levels)]
    )

    def mix(forecasts: np.ndarray) -> np.ndarray:
        combined = np.stack([combine(forecasts[:, j], fitted[j]) for j in range(len(levels))], axis=1)
        return np.fmax.accumulate(combined, axis=1)

    mode = rule.recalibrate if history_hours >= rule.min_hours else NONE
    if rule.trend <= 0:
        correction = corrections(history_actual, mix(history), levels, mode)
        return recalibrated(mix(scored), correction, rule.recalibrate), fitted, correction
    if history_trend is None or scored_trend is None:
        raise ValueError(f"{rule.name} corrects per turn of the load: the windows' trends are needed")
    by_turn = turn_corrections(history_actual, mix(history), turns(history_trend, rule.trend), levels, mode)
    mixed, turn = mix(scored), turns(scored_trend, rule.trend)
    out = np.empty_like(mixed)
    for index in range(len(TURNS)):
        mine = turn == index
        out[mine] = recalibrated(mixed[mine], by_turn[index], rule.recalibrate)
    return out, fitted, by_turn


def turn_corrections(
    actual: np.ndarray, mix: np.ndarray, turn: np.ndarray, levels: tuple[float, ...], mode: str
) -> np.ndarray:
    """(turns, quantiles): :func:`corrections` fitted on each turn's windows (``turn`` (m,), indices into
    :data:`TURNS`), or on all of them for a turn with fewer than ``calibration.MIN_WINDOWS`` windows."""
    pooled = corrections(actual, mix, levels, mode)
    return np.stack(
        [
            corrections(actual[turn == index], mix[turn == index], levels, mode)
            if (turn == index).sum() >= calibration.MIN_WINDOWS
            else pooled
            for index in range(len(TURNS))
        ]
    )
