"""Benchmark: how far below the best baseline a forecaster could get on the folds of issue 16, with hindsight.

    .venv/bin/python benchmarks/forecast_bound.py [--horizons 15 60] [--folds 4] [--first-fraction 0.5]
        [--groups 5] [--philly-days 3] [--only genai|philly]

Issue 16 asks for a P90 pinball loss at most 0.80x the best baseline's, by the median over the folds of
``benchmarks/forecast_accuracy.py`` (same traces, same cuts), and at most 1.0x on the worst fold. Every learner
tried there — the LSTM, ensembles, expert mixes, gradient-boosted quantile regression (GBM) fitted on all the
windows before each fold — stays near 1.0x on Philly. This asks whether any model reading those windows could
do better, by giving the GBM of ``benchmarks/quantile_gbm.py`` (same features, same settings) what no forecaster
has: the fold's own future. Per fold, four rows, each as a ratio to the fold's best baseline:

- ``causal``: fitted on every window whose target is known before the fold's cut (what a forecaster could have);
- ``hindsight``: the fold's windows are split into ``--groups`` groups of series (of jobs on Philly, so that a
  job's GPUs are never on both sides), and each group is forecast by a model fitted on the other groups'
  windows of the same fold: the fold's distribution known exactly, the forecast window itself not;
- ``hindsight + past``: the same, fitted on the other groups' windows of the fold and every window before it;
- ``baseline x factor``: the baseline and the constant factor on it that give the fold's lowest P90 loss, both
  chosen in hindsight: the most a calibration of one baseline could take out of the fold.

A hindsight ratio near 1.0 says the goal is beyond what these windows hold, whatever the learner: the baseline
already takes what the inputs tell about the next minutes, and 0.80 would need another signal. A hindsight ratio
far below the causal one says the loss is the shift from one fold to the next, which online learning and
calibration could chase. Figures are printed, never asserted. No seed: the GBM is deterministic.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"


def series_groups(panel: Any, trace: str, groups: int) -> np.ndarray:
    """(n_series,) group of each series: jobs on Philly (its series are job/machine/gpu), else the series."""
    names = [str(key[0]) for key in panel.keys]
    units = [name.split("/")[0] for name in names] if trace == "philly" else names
    distinct = sorted(set(units))
    order = np.random.default_rng(0).permutation(len(distinct))
    group_of = {unit: int(order[i]) % groups for i, unit in enumerate(distinct)}
    return np.array([group_of[unit] for unit in units])


def cross_fitted(
    fit: Any, fold: Any, past: Any | None, group: np.ndarray, spec: Any, groups: int
) -> np.ndarray:
    """The fold's forecasts, each group's from a model fitted on the other groups' windows of the fold (and on
    every window of ``past``, when given)."""
    from slicewise.forecasting.windows import Windows

    out = np.zeros((len(fold.targets), len(spec.horizons_minutes), len(spec.quantiles)))
    of_window = group[fold.series]
    for g in range(groups):
        here = of_window == g
        if not here.any():
            continue
        train = fold.subset(~here)
        if past is not None:
            train = Windows(
                *(np.concatenate([getattr(train, f.name), getattr(past, f.name)]) for f in fields(Windows))
            )
        out[here] = fit(train, spec)(fold.inputs[here])
    return out


def scaled_baseline(panel: Any, fold: Any, spec: Any) -> np.ndarray:
    """Every quantile of the fold's forecasts from the baseline and the factor (within e^+-2) that together
    give the fold's lowest P90 pinball loss, chosen in hindsight: the most any calibration of one baseline could
    take out of the fold."""
    from slicewise.forecasting.baselines import BASELINES
    from slicewise.forecasting.metrics import pinball

    steps = spec.horizon_steps()[0]
    actual = fold.targets[:, 0].astype(np.float64)
    factors = np.exp(np.linspace(-2.0, 2.0, 161))
    best, best_loss = np.zeros(len(actual)), np.inf
    for baseline in BASELINES.values():
        point = baseline(panel.load, step_s=panel.step_s, horizon_steps=steps)[fold.series, fold.step]
        if not np.isfinite(point).all():
            continue  # a baseline without an answer for every window (the 24-hour one on a short trace)
        for factor in factors:
            loss = pinball(actual, factor * point, spec.upper_quantile)
            if loss < best_loss:
                best, best_loss = factor * point, loss
    return np.repeat(best[:, None, None], len(spec.quantiles), axis=2)


def fold_rows(trace: str, panel: Any, spec: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    from quantile_gbm import gbm_reference

    from slicewise.forecasting.backtest import fold_cuts
    from slicewise.forecasting.evaluation import evaluate, held_out_windows
    from slicewise.forecasting.windows import make_windows

    n_steps = panel.load.shape[1]
    cuts = fold_cuts(n_steps, int(n_steps * args.first_fraction), args.folds)
    group = series_groups(panel, trace, args.groups)
    stride = spec.training.window_stride
    rows = []
    for cut, end in itertools.pairwise(cuts):
        began = time.perf_counter()
        windows = held_out_windows(panel, spec, cut)
        fold = windows.subset(np.flatnonzero(windows.step < end))
        past = make_windows(panel.head(cut), spec, stride=stride)  # targets known before the cut
        if not len(fold.targets) or not len(past.targets):
            continue
        forecasts = {
            "causal": gbm_reference(past, spec)(fold.inputs),
            "hindsight": cross_fitted(gbm_reference, fold, None, group, spec, args.groups),
            "hindsight + past": cross_fitted(gbm_reference, fold, past, group, spec, args.groups),
            "baseline x factor": scaled_baseline(panel, fold, spec),
        }
        predictors = {name: _fixed(f) for name, f in forecasts.items()}
        evaluation = evaluate(panel, spec, predictors, eval_from_step=cut, windows=fold)
        horizon = spec.horizons_minutes[0]
        best, best_p90 = evaluation.best_baseline(horizon, "pinball_p90")
        _, best_mae = evaluation.best_baseline(horizon, "mae")
        row: dict[str, Any] = {"cut": cut, "windows": len(fold.targets), "best": best}
        for name in forecasts:
            row[name] = (
                evaluation.metric(name, horizon, "pinball_p90") / best_p90,
                evaluation.metric(name, horizon, "mae") / best_mae,
                evaluation.metric(name, horizon, "under_provision_rate_p90"),
            )
        shown = "; ".join(f"{name} {_ratios(row[name])}" for name in forecasts)
        print(
            f"  cut {cut:>6}: {len(fold.targets):>6} windows, best baseline {best}: {shown} "
            f"[{time.perf_counter() - began:.0f} s]",
            flush=True,
        )
        rows.append(row)
    return rows


def _fixed(forecast: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A predictor that answers the fold's windows, which are the only ones ``evaluate`` asks it about."""

    def predict(inputs: np.ndarray) -> np.ndarray:
        assert len(inputs) == len(forecast)
        return forecast

    return predict


NAMES = ("causal", "hindsight", "hindsight + past", "baseline x factor")


def _ratios(cell: tuple[float, float, float]) -> str:
    p90, mae, under = cell
    return f"{p90:.3f} (MAE {mae:.3f}, {under:.1%})"


def summary(rows: list[dict[str, Any]]) -> str:
    """Per row name: P90 ratio median / worst fold, MAE ratio median, median under-provisioning."""
    parts = []
    for name in NAMES:
        p90 = [row[name][0] for row in rows]
        mae = [row[name][1] for row in rows]
        under = [row[name][2] for row in rows]
        parts.append(
            f"{name} {statistics.median(p90):.3f} / {max(p90):.3f}, MAE {statistics.median(mae):.3f}, "
            f"{statistics.median(under):.1%}"
        )
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES, help=f"trace folder (default {TRACES})")
    parser.add_argument("--horizons", type=int, nargs="+", default=[15, 60])
    parser.add_argument("--folds", type=int, default=4, help="rolling-origin folds (default 4)")
    parser.add_argument("--first-fraction", type=float, default=0.5, help="span before the first cut (0.5)")
    parser.add_argument(
        "--groups", type=int, default=5, help="groups of series for the cross-fit (default 5)"
    )
    parser.add_argument("--philly-days", type=float, default=3.0, help="Philly's last days used (default 3)")
    parser.add_argument("--only", choices=["genai", "philly"], default=None)
    args = parser.parse_args()
    if not args.traces.is_dir():
        raise SystemExit(f"public GPU traces not found at {args.traces} (they live in ../shared/data/traces)")

    from forecast_accuracy import trace_panels

    from slicewise.forecasting.backtest import backtest_spec
    from slicewise.forecasting.spec import load_specs

    shipped = load_specs()[0]
    began = time.perf_counter()
    summaries = []
    for trace, panel, trace_spec in trace_panels(args, shipped):
        for horizon in args.horizons:
            spec = backtest_spec(trace_spec, horizon, panel.step_s)
            print(f"-- {horizon} min")
            rows = fold_rows(trace, panel, spec, args)
            if not rows:
                print("  no windows at this horizon")
                continue
            summaries.append(f"{trace}, {horizon} min: {summary(rows)}")
    print(
        "\nP90 pinball ratio to the best baseline, median / worst fold; MAE ratio, median; P90 under-provisioning:"
    )
    for line in summaries:
        print("  " + line)
    print(f"({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
