"""Benchmark: the LSTM forecaster against the baselines on two public GPU traces, by rolling-origin evaluation.

    .venv/bin/python benchmarks/forecast_accuracy.py [--horizons 15 60] [--seeds 0 1 2] [--folds 4]
        [--first-fraction 0.5] [--epochs 8] [--update-epochs E] [--replay-ratio R] [--philly-days 3]
        [--only genai|philly]
        [--calibration-gain G] [--calibration-hours N] [--calibration-dead-band B]
        [--expert-weights hedge leader] [--expert-eta 2 5 10] [--expert-hours 1 0]
        [--expert-recalibrate none shift scale] [--expert-recalibrate-min-hours 0 2] [--expert-trend 0 0.1]
        [--expert-trend-span quarter hour]
        [--gbm-reference levels residual]

Each (trace, horizon, seed) is one :func:`slicewise.forecasting.backtest.run_backtest` with ``--folds`` folds:
a fresh model trained on the first ``--first-fraction`` of the trace's time span, then, before each of the
folds the rest is cut into, updated incrementally on the windows whose targets became known since its previous
update (with a replay of older ones) and recalibrated on the hour before the cut, as production does hourly
(expanding window); each fold is scored with every baseline.
Prints, per fold, the LSTM's P90 pinball loss and MAE as ratios to the best baseline's (below 1: the LSTM is
better), calibrated and as trained, the P90's under-provisioning rate and the fleet's mean load in the fold
and in the hour before its cut; then per (trace, horizon) the median over folds and seeds and the worst fold,
and the same for the folds whose load fell by a quarter or more from the hour before, rose as much, or
neither (the worst folds on GenAI are falls, which the EWMA follows within minutes). One fold or one seed is
weak evidence (fresh models on these small traces differ by tens of points from seed to seed).
Figures are printed, never asserted.

``--expert-weights`` adds, per fold, the LSTM combined per quantile with the baselines
(:mod:`slicewise.forecasting.experts`): Hedge with each ``--expert-eta`` and/or follow-the-leader, the weights
fitted on the last ``--expert-hours`` hours of windows whose targets are known before the cut (0: all so far),
and prints their ratios next to the shipped LSTM's. ``--expert-recalibrate shift`` and/or ``scale`` add each
rule with its mix recalibrated on the same known windows (rows ``..._shift``, ``..._scale``; ``none``: as mixed),
each ``--expert-recalibrate-min-hours`` H > 0 a copy that corrects only once those windows span H hours
(``..._minHh``); each ``--expert-trend`` band B > 0 a copy fitted per turn of the fleet's load (``..._trendB``,
Mondrian: falls, rises and neither corrected apart), by its last quarter hour against its last hour, or with
``--expert-trend-span hour`` its last hour against the hour before (``..._hourtrendB``). ``--expert-weights
model`` is the LSTM alone, so its recalibrated rows correct the shipped model's own quantiles on every known
window so far.

``--gbm-reference`` adds reference rows, not shipped: gradient-boosted quantile regression on hand-made window
features (``benchmarks/quantile_gbm.py``), fitted afresh before every fold on every window the LSTM's update
trains on (up to the cut with the shipped spec; before the calibration hour where the spec fits one or expert
rules are given), on the target itself (``levels``, row ``gbm_reference``) and/or on the target less the last
hour's mean (``residual``, row ``gbm_residual``): how much a different learner gets out of the same windows.
It does not depend on the seed.

- **Alibaba GenAI 2026** (``alibaba_gentd26_gpu_util_dev.csv``): 76 inference pods, 57 s samples over 22.8 h,
  percent -> 0-1 on a 60 s grid; the shipped spec, trained for up to ``--epochs`` epochs within the budget.
- **Microsoft Philly** (``philly_dre_jobstart_windows_gpu_util.parquet``): one series per job x machine x GPU,
  each only the 14 minutes around its job's start. A dense grid of all 40,202 of them over the trace's 71 days
  would hold 4 billion cells, so only the series of the last ``--philly-days`` days are used. The shipped
  spec's 15 observed steps per window exceed a 14-minute series, so Philly runs with
  ``min_observed_steps=3``, ``window_steps=16`` (longer windows would be padding only) and
  ``window_stride=1`` (a series has at most nine windows). A 60-minute target needs 30 observed minutes, so
  that horizon has no windows there: reported as such.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"
GENAI = "alibaba_gentd26_gpu_util_dev.csv"
PHILLY = "philly_dre_jobstart_windows_gpu_util.parquet"
DAY_S = 86_400


def genai_panel(traces: Path) -> Any:
    """The GenAI utilisation trace on a 60 s grid, as a 0-1 load."""
    import pandas as pd

    from slicewise.forecasting.backtest import panel_from_long

    frame = pd.read_csv(traces / GENAI)
    return panel_from_long(frame, "timestamp_anon", "container_ip", "value", 60, 100.0)


def philly_panel(traces: Path, days: float) -> Any:
    """Philly's job-start windows of the last ``days`` days: one series per job x machine x GPU, 0-1 load."""
    import numpy as np
    import pandas as pd

    from slicewise.forecasting.backtest import panel_from_long

    raw = pd.read_parquet(traces / PHILLY)
    seconds = (pd.to_datetime(raw["timestamp"]) - pd.Timestamp(0)) // pd.Timedelta(seconds=1)
    frame = pd.DataFrame(
        {
            "series": raw["job_id"] + "/" + raw["machine"] + "/" + raw["gpu_index"].astype(str),
            "timestamp": seconds,
            "value": raw["gpu_util_pct"].where(raw["gpu_util_pct"] >= 0, np.nan),  # -1 = not available
        }
    )
    # Whole series only: a window cut in two at the boundary would be a shorter, different series.
    first = frame.groupby("series")["timestamp"].transform("min")
    frame = frame[first >= frame["timestamp"].max() - days * DAY_S]
    return panel_from_long(frame, "timestamp", "series", "value", 60, 100.0)


def philly_spec(spec: Any) -> Any:
    window_steps, min_observed_steps = 16, 3
    # Members' spans keep their share of the window (120, 60, 30 of 120 -> 16, 8, 4 of 16).
    spans = tuple(
        max(min_observed_steps, round(steps * window_steps / spec.window_steps))
        for steps in spec.architecture.member_window_steps
    )
    return dataclasses.replace(
        spec,
        window_steps=window_steps,
        min_observed_steps=min_observed_steps,
        training=dataclasses.replace(spec.training, window_stride=1),
        architecture=dataclasses.replace(spec.architecture, member_window_steps=spans),
    )


def trace_panels(args: argparse.Namespace, spec: Any) -> Iterator[tuple[str, Any, Any]]:
    """(trace, panel, spec for it) of each trace ``--only`` leaves in, loaded from ``--traces`` and announced."""
    traces = [
        ("genai", lambda: genai_panel(args.traces), spec),
        ("philly", lambda: philly_panel(args.traces, args.philly_days), philly_spec(spec)),
    ]
    for trace, load_panel, trace_spec in traces:
        if args.only not in (None, trace):
            continue
        panel = load_panel()
        print(f"\n== {trace}: {len(panel.keys):,} series x {panel.load.shape[1]:,} steps of {panel.step_s} s")
        yield trace, panel, trace_spec


def best_baseline(models: dict[str, dict[str, Any]], metric: str) -> tuple[str, float | None]:
    from slicewise.forecasting.baselines import BASELINES

    scored = [(name, models[name][metric]) for name in BASELINES if models[name][metric] is not None]
    return min(scored, key=lambda item: item[1]) if scored else ("none", None)


def print_run(trace: str, result: dict[str, Any], wall_s: float) -> None:
    models = result["models"]
    print(
        f"\n{trace}, horizon {result['horizon_minutes']} min: {result['series']:,} series x {result['steps']:,} "
        f"steps; trained on {result['train_windows']:,} windows ({result['epochs']} epochs, "
        f"{result['train_seconds']:.0f} s), scored on {result['test_windows']:,}; {wall_s:.0f} s in all"
    )
    print(f"  {'model':<20} {'pinball_p90':>11} {'mae':>8} {'under_prov_p90':>14} {'n':>8}")
    for name, scores in models.items():
        cells = [_fmt(scores["pinball_p90"]), _fmt(scores["mae"]), _fmt(scores["under_provision_rate_p90"])]
        print(f"  {name:<20} {cells[0]:>11} {cells[1]:>8} {cells[2]:>14} {scores['n']:>8,}")


def ratio(models: dict[str, dict[str, Any]], metric: str, name: str = "lstm") -> float | None:
    """``name``'s ``metric`` over the best baseline's (below 1: better than every baseline)."""
    value = models[name][metric]
    _, best = best_baseline(models, metric)
    return value / best if value is not None and best else None


def fold_rows(
    trace: str, seed: int, result: dict[str, Any], variants: list[str] | None = None
) -> list[dict[str, Any]]:
    return [
        {
            "trace": trace,
            "horizon": result["horizon_minutes"],
            "seed": seed,
            "fold": index,
            "p90": ratio(fold["models"], "pinball_p90"),
            "p90_raw": ratio(fold["models"], "pinball_p90", "lstm_uncalibrated"),
            "mae": ratio(fold["models"], "mae"),
            "mae_raw": ratio(fold["models"], "mae", "lstm_uncalibrated"),
            "under": fold["models"]["lstm"]["under_provision_rate_p90"],
            "under_raw": fold["models"]["lstm_uncalibrated"]["under_provision_rate_p90"],
            "baseline": best_baseline(fold["models"], "pinball_p90")[0],
            "calibration": fold["calibration"],
            "load": fold["fleet_load"],
            "load_before": fold["fleet_load_before"],
            "variants": {
                name: (
                    ratio(fold["models"], "pinball_p90", name),
                    ratio(fold["models"], "mae", name),
                    fold["models"][name]["under_provision_rate_p90"],
                    fold.get("expert_weights", {}).get(name, {}).get("p90", [None])[0],
                )
                for name in [LSTM_NAME, *(variants or [])]
            },
        }
        for index, fold in enumerate(result["folds"])
    ]


LSTM_NAME = "lstm"


def variant_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per variant (the shipped LSTM first): P90 pinball ratio median / worst, MAE ratio median / worst,
    median under-provisioning, and the LSTM's median weight in the P90 mix."""
    import numpy as np

    def stat(values: list[float | None], worst: bool = False) -> str:
        known = [v for v in values if v is not None]
        if not known:
            return "-"
        return f"{max(known):.3f}" if worst else f"{float(np.median(known)):.3f}"

    first, lines = rows[0], []
    for name in first["variants"]:
        cols = [list(c) for c in zip(*(r["variants"][name] for r in rows), strict=True)]
        lines.append(
            f"{first['trace']:<7} {first['horizon']:>3} {name:<30} {stat(cols[0]):>10} {stat(cols[0], True):>10} "
            f"{stat(cols[1]):>8} {stat(cols[1], True):>8} {stat(cols[2]):>7} {stat(cols[3]):>10}"
        )
    return lines


def fold_line(row: dict[str, Any]) -> str:
    factors = " ".join(f"{q} x{math.exp(v):.2f}" for q, v in row["calibration"].items())
    return (
        f"{row['trace']:<7} {row['horizon']:>3} {row['seed']:>4} {row['fold']:>4} {_fmt(row['p90']):>8} "
        f"{_fmt(row['p90_raw']):>8} {_fmt(row['mae']):>8} {_fmt(row['under']):>7} {_fmt(row['under_raw']):>7} "
        f"{row['baseline']:>16}  {factors}  load {_fmt(row['load'])} ({_fmt(row['load_before'])} before)"
    )


#: A fold's fleet load this far below (above) the hour before its cut counts as a fall (a rise).
LOAD_TURN = 0.25


def load_turn(row: dict[str, Any]) -> str:
    """``fall``, ``rise`` or ``neither`` (:func:`slicewise.forecasting.experts.turns`, band ``LOAD_TURN``): the
    fleet's mean load in the fold against the hour before its cut (``neither`` too where either is unknown or the
    hour before had no load)."""
    import numpy as np

    from slicewise.forecasting.experts import TURNS, turns

    load, before = row["load"], row["load_before"]
    ratio = load / before if load is not None and before else float("nan")
    return TURNS[int(turns(np.array([ratio]), LOAD_TURN)[0])]


def load_turn_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per model (the LSTM, then each variant and reference) and kind of turn: the folds, and their P90 pinball
    ratio median / worst and median under-provisioning."""
    import numpy as np

    from slicewise.forecasting.experts import TURNS

    first, lines = rows[0], []
    for name in first["variants"]:
        for turn in TURNS:
            mine = [
                r["variants"][name]
                for r in rows
                if load_turn(r) == turn and r["variants"][name][0] is not None
            ]
            if not mine:
                continue
            p90 = [v[0] for v in mine]
            under = [v[2] for v in mine if v[2] is not None]
            median_under = float(np.median(under)) if under else float("nan")
            lines.append(
                f"{first['trace']:<7} {first['horizon']:>3} {name:<24} {turn:<7} {len(mine):>5} "
                f"{float(np.median(p90)):>10.3f} {max(p90):>10.3f} {median_under:>7.3f}"
            )
    return lines


def summary_line(rows: list[dict[str, Any]]) -> str:
    """Median over folds and seeds, and the worst fold, of the ratios; the median under-provisioning."""
    import numpy as np

    def stat(key: str, worst: bool = False) -> str:
        known = [r[key] for r in rows if r[key] is not None]
        if not known:
            return "-"
        return f"{max(known):.3f}" if worst else f"{float(np.median(known)):.3f}"

    first = rows[0]
    return (
        f"{first['trace']:<7} {first['horizon']:>3} {len(rows):>5} {stat('p90'):>10} {stat('p90', True):>10} "
        f"{stat('p90_raw'):>10} {stat('p90_raw', True):>10} {stat('mae'):>8} {stat('mae', True):>8} "
        f"{stat('mae_raw'):>8} {stat('under'):>7} {stat('under_raw'):>9}"
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES, help=f"trace folder (default {TRACES})")
    parser.add_argument("--horizons", type=int, nargs="+", default=[15, 60])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    parser.add_argument("--folds", type=int, default=4, help="rolling-origin folds (default 4)")
    parser.add_argument(
        "--first-fraction",
        type=float,
        default=0.5,
        help="share of the span before the first cut (default 0.5)",
    )
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=600.0,
        help="training budget per update (default 600: every update trains all --epochs, however busy)",
    )
    parser.add_argument("--epochs", type=int, default=8, help="most epochs per update (default 8)")
    parser.add_argument(
        "--update-epochs",
        type=int,
        default=None,
        help="most epochs of each update after the first fit (default: --epochs; the shipped spec's hourly "
        "update trains 4, which --folds 12 needs to be production's cadence)",
    )
    parser.add_argument(
        "--replay-ratio",
        type=float,
        default=None,
        help="older windows replayed per new window in each update (default: the shipped spec's)",
    )
    parser.add_argument(
        "--refit-each-fold",
        action="store_true",
        help="a diagnostic: a fresh model trained on every window before each fold, instead of the incremental "
        "update production makes (default: off)",
    )
    parser.add_argument(
        "--members", type=int, default=None, help="ensemble members (default: the shipped spec's)"
    )
    parser.add_argument(
        "--member-window-steps",
        type=int,
        nargs="+",
        default=None,
        help="steps of the window each member reads, one per member (default: the shipped spec's)",
    )
    parser.add_argument(
        "--extra-anchors",
        nargs="+",
        choices=["fleet_load", "window_max"],
        default=None,
        help="the spec's architecture.extra_anchors: simple forecasts the head may mix besides the last hour's "
        "(default: the shipped spec's)",
    )
    parser.add_argument(
        "--calibration-gain",
        type=float,
        default=None,
        help="the spec's calibration_gain for this run (default: the shipped spec's)",
    )
    parser.add_argument(
        "--calibration-hours",
        type=int,
        default=None,
        help="the spec's calibration_hours, hours pooled for the fit (default: the shipped spec's)",
    )
    parser.add_argument(
        "--calibration-dead-band",
        type=float,
        default=None,
        help="the spec's calibration_dead_band, |log-factor| treated as none (default: the shipped spec's)",
    )
    parser.add_argument(
        "--expert-mix",
        type=float,
        default=None,
        metavar="ETA",
        help="turn the spec's expert_mix on with this expert_eta: the model itself weighs its quantiles with the "
        "window's simple forecasts, refitted on the calibration hour of every update, as production would "
        "(default: the shipped spec's)",
    )
    parser.add_argument(
        "--expert-memory",
        type=float,
        default=None,
        help="with --expert-mix: the spec's expert_memory, the share of the losses carried from update to update "
        "(default: the shipped spec's)",
    )
    parser.add_argument(
        "--expert-weights",
        nargs="+",
        choices=["hedge", "leader", "model"],
        default=[],
        help="add the LSTM combined per quantile with the baselines by these rules; model: the LSTM alone, "
        "to be recalibrated (default: none)",
    )
    parser.add_argument(
        "--expert-eta", type=float, nargs="+", default=[2.0, 5.0, 10.0], help="Hedge's eta (default 2 5 10)"
    )
    parser.add_argument(
        "--expert-hours",
        type=float,
        nargs="+",
        default=[1.0],
        help="hours of known windows before each cut the weights are fitted on; 0: all so far (default 1)",
    )
    parser.add_argument(
        "--expert-recalibrate",
        nargs="+",
        choices=["none", "shift", "scale"],
        default=["none"],
        help="recalibrate each expert mix on the known windows: none, an additive shift and/or a factor "
        "(default: none)",
    )
    parser.add_argument(
        "--expert-recalibrate-min-hours",
        type=float,
        nargs="+",
        default=[0.0],
        help="hours the known windows must span before a mix is recalibrated (default 0)",
    )
    parser.add_argument(
        "--expert-trend",
        type=float,
        nargs="+",
        default=[0.0],
        help="bands B > 0 each add a copy of every recalibrated rule that corrects per turn of the fleet's load "
        "(its last quarter hour B or more below / above its last hour; default 0: none)",
    )
    parser.add_argument(
        "--expert-trend-span",
        nargs="+",
        choices=["quarter", "hour"],
        default=["quarter"],
        help="what a trend compares: the last quarter hour with the last hour, and/or the last hour with the "
        "hour before (default quarter)",
    )
    parser.add_argument(
        "--gbm-reference",
        nargs="+",
        choices=["levels", "residual"],
        default=[],
        help="add gradient-boosted quantile regression as reference rows (benchmarks/quantile_gbm.py): on "
        "the target itself and/or on the target less the last hour's mean (default: none)",
    )
    parser.add_argument(
        "--only", choices=["genai", "philly"], default=None, help="one trace only (default: both)"
    )
    parser.add_argument(
        "--philly-days", type=float, default=3.0, help="days of Philly job starts (default 3)"
    )
    args = parser.parse_args()
    if not args.traces.is_dir():
        raise SystemExit(f"public GPU traces not found at {args.traces} (they live in ../shared/data/traces)")

    from slicewise.forecasting.backtest import run_backtest
    from slicewise.forecasting.experts import ExpertRule
    from slicewise.forecasting.spec import load_specs

    rules = [
        ExpertRule(kind, eta, hours, recalibrate, min_hours, trend, span)
        for kind in args.expert_weights
        for hours in args.expert_hours
        for eta in (args.expert_eta if kind == "hedge" else [0.0])
        for recalibrate in args.expert_recalibrate
        for min_hours in (args.expert_recalibrate_min_hours if recalibrate != "none" else [0.0])
        for trend in (args.expert_trend if recalibrate != "none" else [0.0])
        for span in (args.expert_trend_span if trend > 0 else ["quarter"])
    ]

    from quantile_gbm import gbm_reference, gbm_residual_reference

    known = {"levels": ("gbm_reference", gbm_reference), "residual": ("gbm_residual", gbm_residual_reference)}
    references = dict(known[form] for form in args.gbm_reference)
    shipped = load_specs()[0]
    # One fresh model per run has no earlier updates to build on, so it gets more epochs than one hourly update.
    spec = dataclasses.replace(
        shipped,
        training=dataclasses.replace(
            shipped.training,
            epochs_per_update=args.epochs,
            replay_ratio=shipped.training.replay_ratio if args.replay_ratio is None else args.replay_ratio,
        ),
        calibration_gain=shipped.calibration_gain if args.calibration_gain is None else args.calibration_gain,
        calibration_hours=(
            shipped.calibration_hours if args.calibration_hours is None else args.calibration_hours
        ),
        calibration_dead_band=(
            shipped.calibration_dead_band
            if args.calibration_dead_band is None
            else args.calibration_dead_band
        ),
        expert_mix=shipped.expert_mix if args.expert_mix is None else True,
        expert_eta=shipped.expert_eta if args.expert_mix is None else args.expert_mix,
        expert_memory=shipped.expert_memory if args.expert_memory is None else args.expert_memory,
        architecture=dataclasses.replace(
            shipped.architecture,
            members=shipped.architecture.members if args.members is None else args.members,
            member_window_steps=(
                shipped.architecture.member_window_steps
                if args.member_window_steps is None
                else tuple(args.member_window_steps)
            ),
            extra_anchors=(
                shipped.architecture.extra_anchors
                if args.extra_anchors is None
                else tuple(args.extra_anchors)
            ),
        ),
    )
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    summaries: list[str] = []
    turns: list[str] = []
    variants: list[str] = []
    for trace, panel, trace_spec in trace_panels(args, spec):
        for horizon in args.horizons:
            mine: list[dict[str, Any]] = []
            for seed in args.seeds:
                run_began = time.perf_counter()
                try:
                    result = run_backtest(
                        panel,
                        trace_spec,
                        args.first_fraction,
                        horizon,
                        seed=seed,
                        time_budget_s=args.time_budget_s,
                        folds=args.folds,
                        expert_rules=rules,
                        references=references,
                        refit_each_fold=args.refit_each_fold,
                        update_epochs=args.update_epochs,
                    )
                except ValueError as exc:
                    print(f"\n{trace}, horizon {horizon} min: not scored: {exc}")
                    break
                print(f"\n[seed {seed}]", end=" ")
                print_run(trace, result, time.perf_counter() - run_began)
                mine += fold_rows(trace, seed, result, [*(rule.name for rule in rules), *references])
            rows += mine
            if mine:
                summaries.append(summary_line(mine))
                turns += load_turn_lines(mine)
                variants += variant_lines(mine)

    print(
        "\nPer fold: ratios to the best baseline (below 1: the LSTM is better); raw = as trained, uncalibrated"
    )
    print(
        f"{'trace':<7} {'h':>3} {'seed':>4} {'fold':>4} {'p90':>8} {'p90 raw':>8} {'mae':>8} {'under':>7} "
        f"{'u. raw':>7} {'best baseline':>16}  calibration"
    )
    print("\n".join(fold_line(row) for row in rows))
    print(
        "\nOver folds and seeds (goal: P90 median <= 0.80, worst <= 1.0; MAE median <= 1.0; under 0.08-0.12)"
    )
    print(
        f"{'trace':<7} {'h':>3} {'folds':>5} {'p90 median':>10} {'p90 worst':>10} {'p90 raw md':>10} "
        f"{'raw worst':>10} {'mae md':>8} {'mae wst':>8} {'mae raw':>8} {'under':>7} {'under raw':>9}"
    )
    print("\n".join(summaries))
    print(
        f"\nBy the fleet's mean load in the fold against the hour before its cut (fall / rise: by "
        f"{LOAD_TURN:.0%} or more)"
    )
    print(
        f"{'trace':<7} {'h':>3} {'model':<24} {'load':<7} {'folds':>5} {'p90 median':>10} {'p90 worst':>10} "
        f"{'under':>7}"
    )
    print("\n".join(turns))
    if rules or references:
        print(
            "\nVariants and references, over folds and seeds (ratios to the best baseline; w lstm: the LSTM's "
            "P90 weight in an expert mix)"
        )
        print(
            f"{'trace':<7} {'h':>3} {'model':<30} {'p90 median':>10} {'p90 worst':>10} {'mae md':>8} "
            f"{'mae wst':>8} {'under':>7} {'w lstm md':>10}"
        )
        print("\n".join(variants))
    print(f"\nwall time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
