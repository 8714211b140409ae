"""Score the model and every baseline on the same held-out windows of a panel.

Held-out means the windows ending at or after ``eval_from_step``; their targets lie in the future of every
input, and the MASE scale comes from the data before ``eval_from_step`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from slicewise.forecasting import metrics
from slicewise.forecasting.baselines import BASELINES, future_mean
from slicewise.forecasting.spec import ForecasterSpec
from slicewise.forecasting.windows import Panel, Windows, make_windows

#: Predicts (n, horizons, quantiles) for windows; the Keras model wrapped by the caller.
Predictor = Callable[[np.ndarray], np.ndarray]
MODEL = "model"


@dataclass(frozen=True)
class Evaluation:
    """Scores per predictor ("model", "champion", baseline names) per horizon in minutes."""

    scores: dict[str, dict[int, dict[str, float]]]
    windows: int

    def metric(self, predictor: str, horizon_minutes: int, name: str) -> float:
        return self.scores.get(predictor, {}).get(horizon_minutes, {}).get(name, float("nan"))

    def best_baseline(self, horizon_minutes: int, name: str) -> tuple[str, float]:
        """The baseline with the lowest ``name`` at the horizon (lower is better for every metric used)."""
        candidates = [(b, self.metric(b, horizon_minutes, name)) for b in BASELINES]
        finite = [(b, v) for b, v in candidates if np.isfinite(v)]
        return min(finite, key=lambda item: item[1]) if finite else ("none", float("nan"))

    def flat(self) -> dict[str, float]:
        """``{predictor}.h{minutes}.{metric}`` for logging (e.g. to MLflow)."""
        return {
            f"{p}.h{h}.{m}": v
            for p, by_h in self.scores.items()
            for h, ms in by_h.items()
            for m, v in ms.items()
        }


def held_out_windows(panel: Panel, spec: ForecasterSpec, eval_from_step: int) -> Windows:
    return make_windows(panel, spec, stride=1, first_step=eval_from_step)


def evaluate(
    panel: Panel,
    spec: ForecasterSpec,
    predictors: dict[str, Predictor],
    *,
    eval_from_step: int,
    windows: Windows | None = None,
) -> Evaluation:
    """Score ``predictors`` (e.g. the new model and the champion) and every baseline on the held-out windows."""
    windows = held_out_windows(panel, spec, eval_from_step) if windows is None else windows
    scores: dict[str, dict[int, dict[str, float]]] = {}
    history = panel.load[:, :eval_from_step]
    # One forward pass per predictor gives every horizon at once.
    predicted = {
        name: predictor(windows.inputs)
        if len(windows.inputs)
        else np.empty((0, len(spec.horizons_minutes), len(spec.quantiles)))
        for name, predictor in predictors.items()
    }
    for h_index, (minutes, steps) in enumerate(zip(spec.horizons_minutes, spec.horizon_steps(), strict=True)):
        actual = windows.targets[:, h_index].astype(float)
        scale = metrics.naive_mae(history, steps) if history.shape[1] > steps else float("nan")
        for name, quantiles in predicted.items():
            by_q = {q: quantiles[:, h_index, i] for i, q in enumerate(spec.quantiles)}
            scores.setdefault(name, {})[minutes] = metrics.score(
                actual, by_q, naive_mae=scale, upper_quantile=spec.upper_quantile
            )
        for name, baseline in BASELINES.items():
            point = baseline(panel.load, step_s=panel.step_s, horizon_steps=steps)[
                windows.series, windows.step
            ]
            # A point forecast is its own answer for every quantile.
            scores.setdefault(name, {})[minutes] = metrics.score(
                actual,
                dict.fromkeys(spec.quantiles, point),
                naive_mae=scale,
                upper_quantile=spec.upper_quantile,
            )
    return Evaluation(scores, len(windows.inputs))


def realised(panel: Panel, spec: ForecasterSpec) -> np.ndarray:
    """(n_series, n_steps, horizons) realised mean loads, for plots of forecast against actual."""
    return np.stack([future_mean(panel.load, h) for h in spec.horizon_steps()], axis=-1)
