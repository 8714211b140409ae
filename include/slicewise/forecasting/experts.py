"""Online expert weighting: combine the model's quantiles with the baselines' forecasts, per quantile.

Each *expert* (the LSTM, every baseline) offers a forecast for each quantile level tau: the LSTM its tau
quantile, a baseline its one point forecast. The combined tau forecast is a convex combination of the experts',
weighted by how they fared on windows whose targets are already known (never the windows being scored):

- ``hedge`` (exponentially weighted average): ``w_k ∝ exp(-eta * L_k / mean(L))``, with ``L_k`` expert k's
  mean pinball loss at tau over those windows. Dividing by the experts' mean loss makes ``eta`` scale-free (a
  trough and a busy hour get equally sharp weights); ``eta`` 0 is the plain average, a large ``eta`` the leader.
- ``leader`` (follow the leader): all weight on the expert with the lowest ``L_k``.

An expert with no forecast on any known window (a seasonal baseline with less than a day of history) gets no
weight; on a window where a weighted expert has no forecast, the others' weights are renormalised. Pure numpy;
:func:`slicewise.forecasting.backtest.run_backtest` scores the result as ``lstm_<rule>`` rows, and
``benchmarks/forecast_accuracy.py --expert-weights`` prints them (figures in docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HEDGE = "hedge"
LEADER = "leader"


@dataclass(frozen=True)
class ExpertRule:
    """How the weights are fitted: ``kind`` (``hedge`` or ``leader``), ``eta`` (hedge only), and ``hours`` of
    known windows before the cut they are fitted on (0: every known window so far)."""

    kind: str
    eta: float = 0.0
    hours: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in (HEDGE, LEADER):
            raise ValueError(f"kind must be {HEDGE!r} or {LEADER!r}, got {self.kind!r}")
        if self.eta < 0 or self.hours < 0:
            raise ValueError(f"eta and hours must not be negative, got {self.eta!r}, {self.hours!r}")

    @property
    def name(self) -> str:
        span = "all" if self.hours == 0 else f"{self.hours:g}h"
        return f"lstm_{self.kind}_{span}" if self.kind == LEADER else f"lstm_hedge{self.eta:g}_{span}"


def pinball_losses(actual: np.ndarray, forecasts: np.ndarray, tau: float) -> np.ndarray:
    """(experts,) mean pinball loss at ``tau`` of ``forecasts`` (n, experts) against ``actual`` (n,), each
    over the windows where both are known; NaN for an expert with none."""
    diff = actual[:, None] - forecasts
    loss = np.maximum(tau * diff, (tau - 1.0) * diff)
    known = np.isfinite(loss)
    counts = known.sum(axis=0)
    sums = np.where(known, loss, 0.0).sum(axis=0)
    return np.divide(sums, counts, out=np.full(forecasts.shape[1], np.nan), where=counts > 0)


def weights(losses: np.ndarray, rule: ExpertRule) -> np.ndarray:
    """(experts,) non-negative weights summing to 1 from the experts' mean losses (NaN: no weight); all zero
    where no expert has a loss."""
    known = np.isfinite(losses)
    out = np.zeros(losses.shape)
    if not known.any():
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


def combined_quantiles(
    history_actual: np.ndarray,
    history: np.ndarray,
    scored: np.ndarray,
    levels: tuple[float, ...],
    rule: ExpertRule,
) -> tuple[np.ndarray, np.ndarray]:
    """Fit the weights per quantile on ``history`` (m, quantiles, experts) against ``history_actual`` (m,) and
    apply them to ``scored`` (n, quantiles, experts); returns the (n, quantiles) forecasts, kept from crossing
    by a running maximum along the quantile axis, and the (quantiles, experts) weights."""
    fitted = np.stack(
        [weights(pinball_losses(history_actual, history[:, j], tau), rule) for j, tau in enumerate(levels)]
    )
    combined = np.stack([combine(scored[:, j], fitted[j]) for j in range(len(levels))], axis=1)
    return np.fmax.accumulate(combined, axis=1), fitted
