"""Backtest the forecaster on any long-format utilisation table: train on the past, score on the future.

:func:`panel_from_long` turns a ``(timestamp, series, value)`` table (a public trace, an export) into a
:class:`~slicewise.forecasting.windows.Panel`; :func:`run_backtest` trains a fresh model on the first part of
that panel's time axis and scores it against every baseline on the rest. Only :func:`run_backtest` imports
TensorFlow, and only once it knows there is something to train on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise.forecasting import metrics
from slicewise.forecasting.evaluation import held_out_windows
from slicewise.forecasting.windows import Panel, Windows, make_windows

if TYPE_CHECKING:
    import pandas as pd

    from slicewise.forecasting.experts import ExpertRule
    from slicewise.forecasting.spec import ForecasterSpec

#: Refuse panels larger than this many cells (series x steps): a dense grid over many short-lived series
#: spread across weeks would otherwise exhaust memory in ``make_windows`` rather than fail with a reason.
MAX_PANEL_CELLS = 30_000_000

#: The model's entries in the result, next to the baselines' names: calibrated, and as trained.
LSTM = "lstm"
LSTM_UNCALIBRATED = "lstm_uncalibrated"

#: A reference model for comparison (not the forecaster): given the windows before a fold's training end
#: and the spec, fitted from scratch, it returns a predictor of (windows, horizons, quantiles) from windows'
#: inputs, as the LSTM's.
Reference = Callable[[Windows, "ForecasterSpec"], Callable[[np.ndarray], np.ndarray]]


def panel_from_long(
    frame: pd.DataFrame,
    timestamp_col: str,
    series_col: str,
    value_col: str,
    step_s: int,
    value_scale: float,
    *,
    max_cells: int = MAX_PANEL_CELLS,
) -> Panel:
    """Resample a long table onto one regular grid shared by all series.

    The grid runs every ``step_s`` seconds from the earliest timestamp (rounded down to a multiple of
    ``step_s``) to the latest, in any series. Step ``k`` holds the mean of the series' non-NaN values with timestamps in
    ``[t0 + k * step_s, t0 + (k + 1) * step_s)``, divided by ``value_scale``; NaN where there are none, so
    gaps, late starts and early ends of a series stay visible as missing. Timestamps are unix seconds
    (numbers) or datetimes. Rows with no timestamp or series are dropped. Series are sorted by their id and
    keyed ``(id, 0, "")``; ``memory`` is all NaN (a long table carries one signal).

    Raises ``ValueError`` (with the reason) for a missing column, a non-numeric value or timestamp, an
    infinite value, a non-positive ``step_s`` or ``value_scale``, no usable rows, or a grid above
    ``max_cells`` cells.
    """
    import pandas as pd

    if int(step_s) != step_s or step_s < 1:
        raise ValueError(f"step_s must be a positive whole number of seconds, got {step_s!r}")
    if not (math.isfinite(value_scale) and value_scale > 0):
        raise ValueError(f"value_scale must be a positive number, got {value_scale!r}")
    missing = [c for c in (timestamp_col, series_col, value_col) if c not in frame.columns]
    if missing:
        raise ValueError(
            f"column(s) {', '.join(map(repr, missing))} not found; the table has {list(frame.columns)}"
        )

    seconds = _seconds(frame[timestamp_col], timestamp_col)
    try:
        values = pd.to_numeric(frame[value_col], errors="raise").to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"column {value_col!r} is not numeric: {exc}") from exc
    if np.isinf(values).any():
        raise ValueError(f"column {value_col!r} holds infinite values; mark missing samples with NaN")
    series = frame[series_col]
    usable = ~np.isnan(seconds) & series.notna().to_numpy()
    if not usable.any():
        raise ValueError("no row has both a timestamp and a series id")
    seconds, values = seconds[usable], values[usable] / value_scale
    ids = series[usable].astype(str).to_numpy()

    names, rows = np.unique(ids, return_inverse=True)  # sorted ids; rows[i] is row i's series
    # Steps on multiples of step_s (whole clock minutes for 60 s), not from the first sample: a few seconds'
    # jitter in whichever series happens to start first must not shift every bucket of every series.
    t0 = math.floor(seconds.min() / step_s) * int(step_s)
    buckets = ((seconds - t0) // step_s).astype(np.int64)
    n_series, n_steps = len(names), int(buckets.max()) + 1
    if n_series * n_steps > max_cells:
        raise ValueError(
            f"the grid would hold {n_series:,} series x {n_steps:,} steps = {n_series * n_steps:,} cells "
            f"(limit {max_cells:,}); use a coarser step or a shorter time span"
        )
    # Mean per (series, step) as sum / count over flat cell indices: one pass, no per-series Python loop.
    seen = ~np.isnan(values)
    cells = rows[seen].astype(np.int64) * n_steps + buckets[seen]
    sums = np.bincount(cells, weights=values[seen], minlength=n_series * n_steps)
    counts = np.bincount(cells, minlength=n_series * n_steps)
    load = np.divide(sums, counts, out=np.full(n_series * n_steps, np.nan), where=counts > 0)
    timestamps = t0 + np.arange(n_steps, dtype=np.int64) * int(step_s)
    return Panel(
        keys=[(str(name), 0, "") for name in names],
        timestamps=timestamps,
        load=load.reshape(n_series, n_steps),
        memory=np.full((n_series, n_steps), np.nan),
        step_s=int(step_s),
    )


def backtest_spec(spec: ForecasterSpec, horizon_minutes: int, step_s: int) -> ForecasterSpec:
    """``spec`` for one horizon on a ``step_s`` grid; the promotion horizon follows, so the copy stays valid."""
    return dataclasses.replace(
        spec,
        step_s=int(step_s),
        horizons_minutes=(int(horizon_minutes),),
        promotion=dataclasses.replace(spec.promotion, horizon_minutes=int(horizon_minutes)),
    )


def fold_cuts(n_steps: int, first: int, folds: int) -> list[int]:
    """Cut points of a rolling-origin evaluation: ``first`` and ``folds - 1`` more, evenly spaced, then
    ``n_steps``; fold i trains on the panel before ``cuts[i]`` and is scored on the windows ending in
    ``[cuts[i], cuts[i + 1])``."""
    if folds < 1:
        raise ValueError(f"folds must be at least 1, got {folds}")
    width = (n_steps - first) / folds
    return [first + round(i * width) for i in range(folds)] + [n_steps]


def run_backtest(
    panel: Panel,
    spec: ForecasterSpec,
    train_fraction: float,
    horizon_minutes: int,
    *,
    seed: int = 0,
    time_budget_s: float | None = None,
    folds: int = 1,
    expert_rules: Sequence[ExpertRule] = (),
    references: Mapping[str, Reference] | None = None,
    refit_each_fold: bool = False,
    update_epochs: int | None = None,
) -> dict[str, Any]:
    """Train a fresh model on the first ``train_fraction`` of the panel's steps and score it on the rest —
    or, with ``folds`` > 1, roll the origin forward: the rest is cut into ``folds`` equal spans, and before
    each span the model is updated incrementally on the windows whose targets became known since its previous
    update (with a replay of older ones), as production does hourly (expanding window).

    Each cut is one step in global time. Training windows (every ``spec.training.window_stride`` steps) come
    from the panel before :func:`~slicewise.forecasting.training.training_end`, as production's update: where
    the spec fits a calibration or an expert mix (or ``expert_rules`` are given), before the cut less the
    calibration hour and the horizon, and the calibration (:func:`~slicewise.forecasting.training.calibrate`)
    is fitted on the windows of that hour; else up to the cut itself (targets known before it), and a fold's
    ``calibration_fit`` is identity (production fits that advice on its held-out gate hour, which a fold has
    not). Held-out windows end at or after the cut (stride 1). The model is ``build_model`` of
    ``spec`` narrowed to ``horizon_minutes`` and the panel's step, trained with
    :func:`~slicewise.forecasting.training.train` (the newest windows plus a replay of older ones, within
    ``time_budget_s``, default the spec's).

    Returns a JSON-safe dict: ``horizon_minutes``; ``folds``, one entry per span with its ``models`` (``"lstm"``
    — calibrated —, ``"lstm_uncalibrated"`` and every baseline, each to its metrics ``mae, smape, mase,
    pinball_p50, pinball_p90, under_provision_rate_p90`` for the shipped spec, NaN as ``None``, and ``n``),
    ``cut``, ``end``, ``train_windows``, ``test_windows``, ``train_seconds``, ``epochs``, ``fitted_windows``
    and of those ``new_windows`` (the update's, not its replay), ``calibration`` (the log-factors per quantile),
    and the fleet's mean load over the span (``fleet_load``) and over the hour before its cut
    (``fleet_load_before``: the worst folds on the public traces are hours the load falls); ``models``: the
    single fold's, or with several folds each metric's median over them; and for the record ``series``,
    ``steps``, ``step_s``, ``split_step`` (the first cut), ``train_windows``, ``test_windows``,
    ``train_seconds``, ``fitted_windows`` and ``epochs`` summed.

    Each of ``expert_rules`` (:mod:`slicewise.forecasting.experts`) adds a model named after it: per quantile,
    a convex combination of the calibrated LSTM's forecast and the baselines', weighted by their pinball losses
    on the windows whose targets are known before the fold's cut, as they were forecast then (the windows
    scored in earlier folds; before the first cut, the calibration hour, which the model did not train on);
    the fold's ``expert_weights`` give the weights per rule, quantile and expert, and ``expert_corrections``,
    for a rule that recalibrates the mix, its correction per quantile (an offset for ``shift``, a log-factor
    for ``scale``), fitted on the same known windows (none while they span less than the rule's ``min_hours``,
    from the first window's last step to the newest's).

    Each of ``references`` adds a model under its name, fitted afresh before each fold on every window before
    the model's training end (expanding window, ``spec.training.window_stride``) and scored as the
    LSTM is: a yardstick for what the inputs allow, not a forecaster Slicewise ships.

    ``refit_each_fold``: a diagnostic, not production's update: before every fold a fresh model (seeded with
    ``seed`` plus the fold's index) is trained as the first fold's is, on every window up to the fold's training
    end, instead of the previous fold's model being updated on the windows since.

    ``update_epochs``: the most epochs of each update after the first fit (default: the spec's
    ``epochs_per_update``, as the first fit's). A fresh model needs more epochs than an hourly update on top of
    it; with folds of an hour, this keeps the updates at production's.

    Raises ``ValueError`` for a fraction outside (0, 1), a non-positive horizon, a step the baselines cannot
    use (one that does not divide an hour), fewer than one fold, or a panel too short to give both training
    and held-out windows.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must lie strictly between 0 and 1, got {train_fraction!r}")
    if int(horizon_minutes) != horizon_minutes or horizon_minutes < 1:
        raise ValueError(f"horizon_minutes must be a positive whole number, got {horizon_minutes!r}")
    if 3600 % panel.step_s:
        raise ValueError(f"step_s={panel.step_s} does not divide an hour; the hourly baselines need it to")
    spec = backtest_spec(spec, int(horizon_minutes), panel.step_s)
    n_series, n_steps = panel.load.shape
    split = int(n_steps * train_fraction)
    if split < 1 or split >= n_steps:
        raise ValueError(f"{n_steps} steps are too few to split at {train_fraction}")
    cuts = fold_cuts(n_steps, split, folds)

    first_end = _train_end(spec, split, panel.step_s, expert_rules)
    train_windows = make_windows(panel.head(first_end), spec, stride=spec.training.window_stride)
    test_windows = held_out_windows(panel, spec, split)
    if not len(train_windows.inputs) or not len(test_windows.inputs):
        raise ValueError(
            f"too little data for a {horizon_minutes}-minute backtest: {len(train_windows.inputs)} training "
            f"and {len(test_windows.inputs)} held-out windows (each needs {spec.min_observed_steps} observed "
            f"steps in its {spec.window_steps}-step history and a known target)"
        )

    import keras

    from slicewise.forecasting.model import build_model
    from slicewise.forecasting.training import known_end

    keras.utils.set_random_seed(
        seed
    )  # train() seeds too, but only after build_model drew the initial weights
    model = build_model(spec)
    results = []
    trained_to = 0
    live = _Live.empty(len(spec.quantiles), len(_experts()))
    updating = (
        spec
        if update_epochs is None
        else dataclasses.replace(
            spec, training=dataclasses.replace(spec.training, epochs_per_update=update_epochs)
        )
    )
    for index in range(folds):
        cut, end = cuts[index], cuts[index + 1]
        train_end = _train_end(spec, cut, panel.step_s, expert_rules)
        if refit_each_fold and index:
            keras.utils.set_random_seed(seed + index)
            model, trained_to = build_model(spec), 0
        fold, live = _fold(
            panel,
            spec if index == 0 or refit_each_fold else updating,
            model,
            trained_to,
            train_end,
            cut,
            end,
            seed + index,
            time_budget_s,
            expert_rules,
            live,
            references,
        )
        results.append(fold)
        # The windows of the last horizon before the training end have no known target yet: the next update
        # takes them as new, as production's hourly update does.
        trained_to = max(trained_to, known_end(spec, train_end))
    models = results[0]["models"] if folds == 1 else _median_models([r["models"] for r in results])
    return {
        "horizon_minutes": int(horizon_minutes),
        "models": models,
        "folds": results,
        "train_windows": sum(r["train_windows"] for r in results),
        "test_windows": sum(r["test_windows"] for r in results),
        "train_seconds": round(sum(r["train_seconds"] for r in results), 3),
        "fitted_windows": sum(r["fitted_windows"] for r in results),
        "epochs": sum(r["epochs"] for r in results),
        "series": n_series,
        "steps": n_steps,
        "step_s": panel.step_s,
        "split_step": split,
    }


def _fold(
    panel: Panel,
    spec: ForecasterSpec,
    model: Any,
    trained_to: int,
    train_end: int,
    cut: int,
    end: int,
    seed: int,
    time_budget_s: float | None,
    expert_rules: Sequence[ExpertRule] = (),
    live: _Live | None = None,
    references: Mapping[str, Reference] | None = None,
) -> tuple[dict[str, Any], _Live]:
    """Update ``model`` on the windows ending in ``[trained_to, train_end)`` whose targets are known before
    ``train_end`` (with a replay of those ending before ``trained_to``), calibrate
    it on the windows between ``train_end`` and the cut (none when it trained up to the cut), score it on the
    windows ending in ``[cut, end)``; with ``expert_rules``, also the combinations fitted on ``live`` (the
    forecasts of earlier folds), returned with this fold's added."""
    from slicewise.forecasting.evaluation import evaluate
    from slicewise.forecasting.model import calibration_of, has_expert_mix, predict, set_calibration
    from slicewise.forecasting.training import calibrate, mix_experts, train

    previous = calibration_of(model)  # the last fold's, as production carries the champion's
    stride = spec.training.window_stride
    if trained_to == 0:
        new, replay = _new_and_replay(make_windows(panel.head(train_end), spec, stride=stride), spec)
    else:
        new = make_windows(panel.head(train_end), spec, stride=stride, first_step=trained_to)
        replay = make_windows(panel.head(train_end), spec, stride=stride).ending_before(trained_to)
    report = train(model, spec, new, replay, seed=seed, time_budget_s=time_budget_s)
    factors, fitted = calibrate(model, panel, spec, train_end, cut, previous)
    if has_expert_mix(model):  # fitted on the same hour, after the calibration, as production does
        mix_experts(model, panel, spec, train_end, cut)
    identity = np.zeros_like(factors)

    served: list[np.ndarray] = []  # the calibrated model's forecasts of the scored windows

    def with_factors(chosen: np.ndarray, keep: bool = False) -> Any:
        def predictor(inputs: np.ndarray) -> np.ndarray:
            set_calibration(model, chosen)
            out = predict(model, inputs)
            if keep:
                served.append(out)
            return out

        return predictor

    windows = held_out_windows(panel, spec, cut).ending_before(end)
    predictors = {
        LSTM_UNCALIBRATED: with_factors(identity),
        LSTM: with_factors(factors, keep=bool(expert_rules)),
    }
    if references:
        seen = make_windows(panel.head(train_end), spec, stride=stride)
        predictors |= {name: fit(seen, spec) for name, fit in references.items()}
    evaluation = evaluate(panel, spec, predictors, eval_from_step=cut, windows=windows)
    horizon = spec.horizons_minutes[0]
    models = {name: _json_metrics(by_h[horizon]) for name, by_h in evaluation.scores.items()}
    live = _Live.empty(len(spec.quantiles), len(_experts())) if live is None else live
    expert_weights: dict[str, dict[str, list[float]]] = {}
    expert_corrections: dict[str, dict[str, float]] = {}
    if expert_rules:
        from slicewise.forecasting.experts import NONE, TREND_SPANS, TURNS, combined_quantiles, known_before

        steps = spec.horizon_steps()[0]
        hour = panel.hour_steps()
        if not len(live.step):  # before the first cut: the calibration hour, unseen in training
            known = make_windows(panel.head(cut), spec, stride=1, first_step=train_end)
            set_calibration(model, factors)
            live = live.plus(
                known,
                _expert_forecasts(panel, steps, known, predict(model, known.inputs)),
                _trends(known, hour),
            )
        scored = _expert_forecasts(
            panel, steps, windows, served[0] if served else np.empty((0, 1, len(spec.quantiles)))
        )
        scored_trend = _trends(windows, hour)
        scale = metrics.naive_mae(panel.load[:, :cut], steps) if cut > steps else float("nan")
        for rule in expert_rules:
            span = 0 if rule.hours == 0 else max(1, round(rule.hours * hour))
            chosen = known_before(live.step, cut, steps, span)
            span_h = (np.ptp(live.step[chosen]) + 1) / hour if chosen.any() else 0.0
            forecast, mix, correction = combined_quantiles(
                live.actual[chosen],
                live.forecasts[chosen],
                scored,
                spec.quantiles,
                rule,
                float(span_h),
                live.trend[chosen, TREND_SPANS.index(rule.trend_span)],
                scored_trend[:, TREND_SPANS.index(rule.trend_span)],
            )
            by_q = {q: forecast[:, j] for j, q in enumerate(spec.quantiles)}
            models[rule.name] = _json_metrics(
                metrics.score(
                    windows.targets[:, 0].astype(float),
                    by_q,
                    naive_mae=scale,
                    upper_quantile=spec.upper_quantile,
                )
            )
            expert_weights[rule.name] = {
                f"p{round(q * 100)}": [round(float(w), 4) for w in mix[j]]
                for j, q in enumerate(spec.quantiles)
            }
            if rule.recalibrate != NONE:
                by_turn = correction[None, :] if correction.ndim == 1 else correction
                suffixes = [""] if correction.ndim == 1 else [f"_{turn}" for turn in TURNS]
                expert_corrections[rule.name] = {
                    f"p{round(q * 100)}{suffix}": round(float(c), 4)
                    for suffix, row in zip(suffixes, by_turn, strict=True)
                    for q, c in zip(spec.quantiles, row, strict=True)
                }
        live = live.plus(windows, scored, scored_trend)
    return {
        "cut": cut,
        "end": end,
        "fleet_load": _mean_fleet_load(panel, cut, end),
        "fleet_load_before": _mean_fleet_load(panel, max(0, cut - panel.hour_steps()), cut),
        "models": models,
        "expert_weights": expert_weights,
        "expert_corrections": expert_corrections,
        "calibration": _levels(spec, factors),
        "calibration_fit": _levels(spec, fitted),
        "train_windows": len(new.inputs) + (len(replay.inputs) if replay is not None else 0),
        "test_windows": evaluation.windows,
        "train_seconds": round(report.seconds, 3),
        "fitted_windows": report.new_windows + report.replay_windows,
        "new_windows": report.new_windows,
        "epochs": report.epochs,
    }, live


def _mean_fleet_load(panel: Panel, start: int, stop: int) -> float | None:
    """The fleet's mean load per step (:meth:`Panel.fleet`) averaged over steps ``[start, stop)``; None for none."""
    loads = panel.fleet()[start:stop]
    return round(float(loads.mean()), 6) if len(loads) else None


def _train_end(spec: ForecasterSpec, cut: int, step_s: int, expert_rules: Sequence[ExpertRule]) -> int:
    """Production's training end, or, for the benchmark's expert rules, which are fitted on the calibration
    hour before the first cut, always before that hour."""
    from slicewise.forecasting.training import calibration_start, training_end

    return max(1, calibration_start(spec, cut, step_s) if expert_rules else training_end(spec, cut, step_s))


def _experts() -> list[str]:
    """The experts an expert rule weighs, in order: the calibrated model, then every baseline."""
    from slicewise.forecasting.baselines import BASELINES

    return [LSTM, *BASELINES]


@dataclasses.dataclass(frozen=True)
class _Live:
    """Windows forecast so far, for expert weighting: each one's last step, realised target, the experts'
    forecasts (windows, quantiles, experts) and the fleet's trend at its end (windows, trend spans), per
    :data:`experts.TREND_SPANS` (:func:`experts.fleet_trend`)."""

    step: np.ndarray
    actual: np.ndarray
    forecasts: np.ndarray
    trend: np.ndarray

    @staticmethod
    def empty(quantiles: int, experts: int) -> _Live:
        from slicewise.forecasting.experts import TREND_SPANS

        spans = len(TREND_SPANS)
        return _Live(
            np.empty(0, dtype=np.int64), np.empty(0), np.empty((0, quantiles, experts)), np.empty((0, spans))
        )

    def plus(self, windows: Windows, forecasts: np.ndarray, trend: np.ndarray) -> _Live:
        return _Live(
            np.concatenate([self.step, windows.step]),
            np.concatenate([self.actual, windows.targets[:, 0].astype(float)]),
            np.concatenate([self.forecasts, forecasts]),
            np.concatenate([self.trend, trend]),
        )


def _trends(windows: Windows, hour_steps: int) -> np.ndarray:
    """(windows, trend spans): each window's :func:`experts.fleet_trend` per :data:`experts.TREND_SPANS`."""
    from slicewise.forecasting.experts import TREND_SPANS, fleet_trend

    return np.stack([fleet_trend(windows.inputs, hour_steps, span) for span in TREND_SPANS], axis=1)


def _expert_forecasts(panel: Panel, steps: int, windows: Windows, lstm: np.ndarray) -> np.ndarray:
    """(windows, quantiles, experts): the model's quantiles (``lstm``, (windows, 1, quantiles)) and each
    baseline's point forecast for every quantile, at one horizon of ``steps`` steps."""
    from slicewise.forecasting.baselines import BASELINES

    n_q = lstm.shape[2]
    points = [
        baseline(panel.load, step_s=panel.step_s, horizon_steps=steps)[windows.series, windows.step]
        for baseline in BASELINES.values()
    ]
    return np.stack([lstm[:, 0, :], *(np.repeat(p[:, None], n_q, axis=1) for p in points)], axis=-1)


def _levels(spec: ForecasterSpec, log_factors: np.ndarray) -> dict[str, float]:
    return {
        f"p{round(q * 100)}": round(float(f), 4) for q, f in zip(spec.quantiles, log_factors[0], strict=True)
    }


def _median_models(per_fold: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | int | None]]:
    """Each model's metrics as the median over the folds (``n`` summed); a metric no fold has stays None."""
    out: dict[str, dict[str, float | int | None]] = {}
    for name in per_fold[0]:
        metrics_here: dict[str, float | int | None] = {}
        for metric in per_fold[0][name]:
            values = [f[name][metric] for f in per_fold if f.get(name, {}).get(metric) is not None]
            if metric == "n":
                metrics_here[metric] = int(sum(values))
            else:
                metrics_here[metric] = float(np.median(values)) if values else None
        out[name] = metrics_here
    return out


def _new_and_replay(windows: Windows, spec: ForecasterSpec) -> tuple[Windows, Windows | None]:
    """The newest windows as the "new" data of an hourly update, the older ones as its replay pool.

    Mirrors production, where an update sees the latest hour plus a sample of history, and keeps the fitted
    set within ``max_windows`` (``train`` takes all new windows up to its share and samples the replay).
    """
    limit = spec.training.max_windows
    n_new = max(1, int(limit / (1 + spec.training.replay_ratio)))
    if len(windows.inputs) <= n_new:
        return windows, None
    order = np.argsort(windows.step, kind="stable")[::-1]
    return windows.subset(order[:n_new]), windows.subset(order[n_new:])


def _seconds(column: pd.Series, name: str) -> np.ndarray:
    """Unix seconds as float64 (NaN where missing) from a numeric or datetime column."""
    import pandas as pd

    if pd.api.types.is_datetime64_any_dtype(column):
        stamps = column.dt.tz_convert("UTC").dt.tz_localize(None) if column.dt.tz is not None else column
        # Not astype("int64") // 1e9: pandas 3 keeps a column's own unit (s, ms, us or ns).
        delta = (stamps - pd.Timestamp(0)) / pd.Timedelta(seconds=1)
        return delta.to_numpy(dtype=np.float64, na_value=np.nan)
    try:
        return pd.to_numeric(column, errors="raise").to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"column {name!r} is neither unix seconds nor datetimes: {exc}") from exc


def _json_metrics(scores: dict[str, float]) -> dict[str, float | int | None]:
    """Metrics with NaN (nothing to score) as ``None`` and the window count as an int."""
    out: dict[str, float | int | None] = {}
    for name, value in scores.items():
        if name == "n":
            out[name] = int(value)
        else:
            out[name] = float(value) if math.isfinite(value) else None
    return out
